//! Window Top-N and window deduplication: `ROW_NUMBER() OVER (PARTITION BY window_start,
//! window_end, ... ORDER BY ...)` in a subquery of FROM, with the outer WHERE bounding the
//! rank (`rownum <= N`, `rownum = 1`), over a window table function's rows or a window
//! aggregation's results; deduplication without a window (`PARTITION BY k ORDER BY rt
//! [DESC]` with `rownum = 1`); and SELECT DISTINCT, a deduplication by all selected values.

use super::*;
use sqlparser::ast::{Function, Value, WindowType};
use weir_operators::{
    Deduplicate, DeduplicateExt, Keep, RankOrder, TopN, TopNExt, WindowRank, WindowRankExt,
};

/// What to write instead of a ROW_NUMBER shape weir does not plan.
const RANK_SHAPES: &str = "weir plans window Top-N and window deduplication: SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end[, keys] ORDER BY x [DESC]) AS rownum FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(rt), INTERVAL ...)) or a window aggregation) [AS] r WHERE rownum <= N; deduplication on the time attribute: SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY rt [DESC]) AS rownum FROM t) WHERE rownum = 1, with 'table.exec.state.ttl' set; and Top-N without a window: SELECT k, rownum, ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x [DESC]) AS rownum FROM t) WHERE rownum <= N, into an upsert table whose PRIMARY KEY is (k, rownum)";

impl Planner {
    /// A SELECT over a subquery that numbers its rows with ROW_NUMBER() OVER (...): a window
    /// Top-N. `None` when the SELECT has no such subquery.
    pub(super) fn rank_query(
        &self,
        q: &Query,
        select: &Select,
    ) -> Result<Option<(Rel, Vec<SqlScalar>)>> {
        let [from] = select.from.as_slice() else {
            return Ok(None);
        };
        let TableFactor::Derived {
            subquery, alias, ..
        } = &from.relation
        else {
            return Ok(None);
        };
        let SetExpr::Select(inner) = subquery.body.as_ref() else {
            return Ok(None);
        };
        let Some((at, call, rank_name)) = row_number_item(inner)? else {
            return Ok(None);
        };
        let grouped = select.having.is_some()
            || !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
        if grouped && from.joins.is_empty() {
            // `SELECT ... FROM (ranked) r WHERE rownum = 1 GROUP BY ...`: the rank bound
            // first, then the GROUP BY over its rows, as
            // `FROM (SELECT * FROM (ranked) r WHERE rownum = 1) r GROUP BY ...`.
            let mut bounded = select.clone();
            bounded.projection = vec![SelectItem::Wildcard(Default::default())];
            bounded.group_by = GroupByExpr::Expressions(Vec::new(), Vec::new());
            bounded.having = None;
            let mut inner = (**subquery).clone();
            *inner.body = SetExpr::Select(Box::new(bounded));
            let mut outer = select.clone();
            outer.selection = None;
            if let TableFactor::Derived {
                subquery, alias, ..
            } = &mut outer.from[0].relation
            {
                **subquery = inner;
                // The rank's subquery named `ranked` when it has no name.
                alias.get_or_insert_with(|| sqlparser::ast::TableAlias {
                    explicit: true,
                    name: sqlparser::ast::Ident::new("ranked"),
                    columns: Vec::new(),
                    at: None,
                });
            }
            let mut q = q.clone();
            *q.body = SetExpr::Select(Box::new(outer));
            return self.query(&q).map(Some);
        }
        if !from.joins.is_empty() || grouped {
            return Err(plan_err(format!(
                "a query over ROW_NUMBER() may only select and filter its rows (no joins or GROUP BY around it); {RANK_SHAPES}"
            )));
        }
        let alias = alias
            .as_ref()
            .map_or_else(|| "ranked".to_string(), |a| a.name.value.clone());
        let Some(WindowType::WindowSpec(spec)) = &call.over else {
            return Err(plan_err(format!(
                "ROW_NUMBER() OVER a named window is not supported; {RANK_SHAPES}"
            )));
        };
        if spec.window_frame.is_some() {
            return Err(plan_err(format!(
                "ROW_NUMBER() OVER (... ROWS/RANGE ...): a frame means nothing to ROW_NUMBER; {RANK_SHAPES}"
            )));
        }
        // The subquery without its ROW_NUMBER: the rows to rank, as a view, with what it
        // ranks by and does not select as hidden columns.
        let written = spec;
        let mut spec = spec.clone();
        let mut rows_query = subquery.as_ref().clone();
        if let SetExpr::Select(s) = rows_query.body.as_mut() {
            s.projection.remove(at);
            hide_rank_inputs(s, &mut spec);
        }
        let rel = self.view(&rows_query, &alias)?;
        if rel.upsert_keys.is_some() && rel.changes.is_none() {
            return Err(plan_err(format!(
                "ROW_NUMBER() over these updates is not supported (they do not say which row each replaces); {RANK_SHAPES}"
            )));
        }
        let column = |e: &SqlExpr, what: &str| -> Result<String> {
            match e {
                SqlExpr::Identifier(i) => rel.resolve(None, &i.value),
                SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
                    rel.resolve(Some(&p[0].value), &p[1].value)
                }
                other => Err(plan_err(format!(
                    "ROW_NUMBER() OVER ({what} {other}): weir {what} columns only"
                ))),
            }
        };
        let partition = (spec.partition_by.iter())
            .map(|e| column(e, "PARTITION BY"))
            .collect::<Result<Vec<_>>>()?;
        let named = |n: &str| {
            partition
                .iter()
                .find(|c| c.eq_ignore_ascii_case(n))
                .cloned()
        };
        if spec.order_by.is_empty() {
            return Err(plan_err(format!(
                "ROW_NUMBER() OVER (...) needs an ORDER BY; {RANK_SHAPES}"
            )));
        }
        if let Some(p) = (written.order_by.iter()).find(|o| self.is_proc_time(inner, &o.expr)) {
            return Err(plan_err(format!(
                "ROW_NUMBER() OVER (... ORDER BY {}): ranking on processing time keeps whichever row arrived first, so a replay gives other rows; weir deduplicates on an event-time attribute: {}",
                p.expr,
                match rel.time_attr_names().as_str() {
                    "none" => "declare a WATERMARK on the table and ORDER BY its column [DESC]".to_string(),
                    names => format!("ORDER BY {names} [DESC]"),
                }
            )));
        }
        let mut order_by = Vec::new();
        for o in &spec.order_by {
            order_by.push(RankOrder {
                column: column(&o.expr, "ORDER BY")?,
                descending: o.options.asc == Some(false),
                nulls_first: o.options.nulls_first,
            });
        }
        if rel.resolve(None, &rank_name).is_ok() {
            return Err(plan_err(format!(
                "ROW_NUMBER() AS {rank_name}: the subquery already has a column `{rank_name}`; name the rank otherwise"
            )));
        }
        // The outer WHERE: the rank's bounds, and any other condition on the ranked rows.
        let mut conditions = Vec::new();
        if let Some(w) = &select.selection {
            joins::split_and(w, &mut conditions);
        }
        let (mut first, mut last) = (1u64, None::<u64>);
        let mut others = Vec::new();
        for c in conditions {
            match rank_bound(c, &rank_name)? {
                Some((lo, hi)) => {
                    first = first.max(lo);
                    last = Some(last.map_or(hi, |l| l.min(hi)));
                }
                None => others.push(c.clone()),
            }
        }
        let Some(last) = last.filter(|&l| l != u64::MAX) else {
            return Err(plan_err(format!(
                "ROW_NUMBER() AS {rank_name} needs WHERE {rank_name} <= N (or = N, < N) in the query around it, so that each window keeps N rows; {RANK_SHAPES}"
            )));
        };
        if last < first {
            return Err(plan_err(format!(
                "WHERE on `{rank_name}` selects no rank ({first} to {last})"
            )));
        }
        // PARTITION BY items the subquery does not select (as written).
        let hidden_keys: Vec<String> = (written.partition_by.iter())
            .zip(&spec.partition_by)
            .filter(|(_, e)| matches!(e, SqlExpr::Identifier(i) if i.value.starts_with(HIDDEN_RANK_INPUT)))
            .map(|(w, _)| w.to_string())
            .collect();
        let (Some(_), Some(window_end)) = (named("window_start"), named("window_end")) else {
            let over_time = spec.order_by.len() == 1 && rel.is_time_attr(&spec.order_by[0].expr);
            let keep_first =
                over_time && (first, last) == (1, 1) && spec.order_by[0].options.asc != Some(false);
            if let (Some(k), false) = (hidden_keys.first(), keep_first) {
                return Err(plan_err(format!(
                    "ROW_NUMBER() OVER (PARTITION BY {k} ...): without a window its rows update each key's row, so the key must reach the sink: select it in the subquery (`{k} AS name`) and PARTITION BY that name"
                )));
            }
            if over_time && (first, last) == (1, 1) {
                let descending = spec.order_by[0].options.asc == Some(false);
                return self
                    .deduplicate(
                        rel, partition, descending, &rank_name, &alias, &others, select,
                    )
                    .map(Some);
            }
            let ranks = (first, last, rank_name.as_str());
            return self
                .top_n(rel, partition, order_by, ranks, &alias, &others, select)
                .map(Some);
        };
        if rel.updates() {
            return Err(plan_err(format!(
                "a window Top-N over updates is not supported; {RANK_SHAPES}"
            )));
        }
        let rank = WindowRank {
            window_end,
            order_by,
            first_rank: first,
            last_rank: last,
            rank_column: rank_name.clone(),
            // Windows of local times over instants (see Planner::local_windows).
            zone: self.local_windows(&rel).map(|z| z.name().to_string()),
            ..WindowRank::top(last)
        };
        let stream = rel.stream.key_by(&partition).window_rank(rank);
        let mut scope = visible(&rel.scope);
        scope.push(ScopeEntry {
            qualifier: Some(alias.clone()),
            name: rank_name.clone(),
            column: rank_name,
        });
        let mut out = Rel {
            stream,
            scope,
            time_columns: rel.time_columns.clone(),
            proc_time_attrs: Vec::new(),
            primary_key: Vec::new(),
            upsert_keys: None,
            changes: None,
            alias,
            zone: rel.zone.clone(),
        };
        for c in &others {
            let predicate = scalar(c, &out)?;
            out.stream = out.stream.apply("calc", Arc::new(Calc::filter(predicate)));
        }
        let exprs = select_exprs(select, &out, None)?;
        Ok(Some((out, exprs)))
    }
}

impl Planner {
    /// Top-N without a window: `ROW_NUMBER() OVER (PARTITION BY k ORDER BY x) AS rownum` with
    /// `rownum <= N` (or a range of ranks) around it, over append-only rows or a changelog: a
    /// changelog keyed by the partition and the rank (`top_n`).
    #[allow(clippy::too_many_arguments)]
    fn top_n(
        &self,
        rel: Rel,
        mut partition: Vec<String>,
        order_by: Vec<RankOrder>,
        (first, last, rank_name): (u64, u64, &str),
        alias: &str,
        others: &[SqlExpr],
        select: &Select,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        // A changelog that takes each replaced row back (a GROUP BY's upserts normalized).
        let mut rel = self.retracting(rel)?;
        let Some(time_column) = (rel.changes.as_ref())
            .map(|c| c.time_column.clone())
            .or_else(|| rel.stream.event_time())
        else {
            return Err(plan_err(format!(
                "a Top-N without a window ({rank_name} <= {last}) emits updates, and weir needs the rows' event time for them (a state TTL and the GROUP BYs and filters after it run in it): declare a WATERMARK on the table, or rank per window. {RANK_SHAPES}"
            )));
        };
        let mut spec = TopN::new(order_by, first, last, rank_name, OP_COLUMN);
        if let Some(ttl) = self.state_ttl_ms()? {
            spec = spec.with_ttl(ttl, &time_column);
        }
        // As Flink's batch execution: each key's final ranks, rows like any other.
        let batch = self.batch.is_some();
        if batch {
            spec = spec.final_only();
        }
        // Without PARTITION BY, one ranking of all rows, in one subtask (as Flink).
        let mut keys = partition.clone();
        if partition.is_empty() {
            let mut cols: Vec<(String, SqlScalar)> = (rel.stream.schema().fields().iter())
                .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
                .collect();
            cols.push((aggregate::ALL_ROWS.into(), SqlScalar::new("'(all rows)'")));
            rel.stream = rel.stream.apply("calc", Arc::new(Calc::project(cols)));
            keys.push(aggregate::ALL_ROWS.into());
        }
        let stream = rel.stream.key_by(&keys).top_n(spec);
        let mut scope = visible(&rel.scope);
        scope.push(ScopeEntry {
            qualifier: Some(alias.to_string()),
            name: rank_name.to_string(),
            column: rank_name.to_string(),
        });
        let made_by = match partition.is_empty() {
            true => format!("the Top-N without a window ({rank_name} <= {last} of all rows)"),
            false => format!(
                "the Top-N without a window ({rank_name} <= {last} per ({}))",
                partition.join(", ")
            ),
        };
        partition.push(rank_name.to_string());
        let mut out = Rel {
            stream,
            scope,
            time_columns: Vec::new(),
            proc_time_attrs: Vec::new(),
            primary_key: Vec::new(),
            upsert_keys: (!batch).then_some(partition),
            changes: (!batch).then_some(Changes {
                retracts: true,
                time_column,
                made_by,
            }),
            alias: alias.to_string(),
            zone: rel.zone.clone(),
        };
        for c in others {
            let predicate = scalar(c, &out)?;
            out.stream = out.stream.apply("calc", Arc::new(Calc::filter(predicate)));
        }
        let exprs = select_exprs(select, &out, None)?;
        Ok((out, exprs))
    }

    /// Deduplication without a window: `ROW_NUMBER() OVER (PARTITION BY k ORDER BY rt [DESC])`
    /// bounded to rank 1 around it. Keeping the first row gives append-only rows (with the
    /// time attribute); keeping the last gives updates keyed by the partition.
    #[allow(clippy::too_many_arguments)]
    fn deduplicate(
        &self,
        rel: Rel,
        partition: Vec<String>,
        descending: bool,
        rank_name: &str,
        alias: &str,
        others: &[SqlExpr],
        select: &Select,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        let keep = if descending { Keep::Last } else { Keep::First };
        let which = match keep {
            Keep::First => "first",
            Keep::Last => "latest",
        };
        if partition.is_empty() {
            return Err(plan_err(format!(
                "ROW_NUMBER() OVER (ORDER BY ...) without PARTITION BY: deduplication keeps the {which} row per key; PARTITION BY the columns that make rows duplicates"
            )));
        }
        let Some(ttl) = self.state_ttl_ms()? else {
            return Err(plan_err(format!(
                "deduplication without a window (keep the {which} row per {}) remembers every key for ever: set 'table.exec.state.ttl' (a key is forgotten that long after its latest row, in event time), or deduplicate per window. {RANK_SHAPES}",
                partition.join(", ")
            )));
        };
        let event_time = rel.stream.event_time();
        if keep == Keep::Last && event_time.is_none() {
            if let Some(c) = others.first() {
                return Err(plan_err(format!(
                    "WHERE {c} around a keep-last deduplication in processing time: its rows update each key's latest row without taking the replaced one back, so a filtered-out update would leave an older row in the sink; put the condition inside the subquery, where it filters rows before deduplication, or order by an event-time attribute"
                )));
            }
        }
        let spec = match keep {
            Keep::First => Deduplicate::keep_first(ttl),
            // A changelog, so that a GROUP BY over the latest rows takes replaced ones back.
            Keep::Last => Deduplicate::keep_last(ttl).changes(OP_COLUMN),
        };
        let deduplicated = rel.stream.key_by(&partition).deduplicate(spec);
        // The rank is 1 in every row.
        let mut cols: Vec<(String, SqlScalar)> = (deduplicated.schema().fields().iter())
            .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
            .collect();
        cols.push((rank_name.to_string(), SqlScalar::new("CAST(1 AS BIGINT)")));
        let stream = deduplicated.apply("calc", Arc::new(Calc::project(cols)));
        let mut scope = visible(&rel.scope);
        scope.push(ScopeEntry {
            qualifier: Some(alias.to_string()),
            name: rank_name.to_string(),
            column: rank_name.to_string(),
        });
        let mut out = Rel {
            stream,
            scope,
            time_columns: match keep {
                Keep::First => rel.time_columns.clone(),
                Keep::Last => Vec::new(),
            },
            proc_time_attrs: Vec::new(),
            primary_key: Vec::new(),
            upsert_keys: (keep == Keep::Last).then_some(partition.clone()),
            changes: match (keep, event_time) {
                (Keep::Last, Some(time_column)) => Some(Changes {
                    retracts: true,
                    time_column,
                    made_by: format!(
                        "the keep-last deduplication per ({}) without a window",
                        partition.join(", ")
                    ),
                }),
                _ => None,
            },
            alias: alias.to_string(),
            zone: rel.zone.clone(),
        };
        for c in others {
            let predicate = scalar(c, &out)?;
            out.stream = out.stream.apply("calc", Arc::new(Calc::filter(predicate)));
        }
        let exprs = select_exprs(select, &out, None)?;
        Ok((out, exprs))
    }

    /// `SELECT DISTINCT ...`: the rows of the SELECT without DISTINCT (`rel`, `exprs`), each
    /// distinct row once, when the watermark reaches its first occurrence: a keep-first
    /// deduplication keyed by all the selected values, bounded by the state TTL.
    pub(super) fn distinct(
        &self,
        d: &sqlparser::ast::Distinct,
        names: Vec<String>,
        rel: Rel,
        exprs: Vec<SqlScalar>,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        if let sqlparser::ast::Distinct::On(on) = d {
            return Err(plan_err(format!(
                "SELECT DISTINCT ON ({}) is not supported; keep one row per key with ROW_NUMBER() OVER (PARTITION BY ... ORDER BY rt) ... WHERE rownum = 1",
                on.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        if rel.updates() {
            return Err(plan_err(
                "SELECT DISTINCT over the updates of a GROUP BY without a window is not supported: its rows are already one per key",
            ));
        }
        let Some(ttl) = self.state_ttl_ms()? else {
            return Err(plan_err(
                "SELECT DISTINCT remembers every distinct row it has seen, for ever: set 'table.exec.state.ttl' (a row is forgotten that long after it was last seen, in event time)",
            ));
        };
        let Some(event_time) = rel.stream.event_time() else {
            return Err(plan_err(
                "SELECT DISTINCT emits a row when the watermark reaches its first occurrence: the table needs a WATERMARK",
            ));
        };
        let columns: Vec<String> = (0..exprs.len())
            .map(|i| format!("__distinct_{i}"))
            .collect();
        let mut cols: Vec<(String, SqlScalar)> =
            columns.iter().cloned().zip(exprs.iter().cloned()).collect();
        cols.push((event_time.clone(), SqlScalar::column(&event_time)));
        let stream = (rel.stream.apply("calc", Arc::new(Calc::project(cols))))
            .key_by(&columns)
            .deduplicate(Deduplicate::keep_first(ttl));
        let mut time_columns = vec![event_time];
        for (c, e) in columns.iter().zip(&exprs) {
            if e.as_column().is_some_and(|x| rel.time_columns.contains(&x)) {
                time_columns.push(c.clone());
            }
        }
        let out = Rel {
            stream,
            scope: (names.into_iter().zip(&columns))
                .map(|(name, column)| ScopeEntry {
                    qualifier: Some(rel.alias.clone()),
                    name,
                    column: column.clone(),
                })
                .collect(),
            time_columns,
            proc_time_attrs: Vec::new(),
            primary_key: Vec::new(),
            upsert_keys: None,
            changes: None,
            alias: rel.alias.clone(),
            zone: rel.zone.clone(),
        };
        let exprs = columns.iter().map(|c| SqlScalar::column(c)).collect();
        Ok((out, exprs))
    }

    /// Whether `e` names a processing-time attribute (`x AS PROCTIME()`) of the table the
    /// ranked rows come from.
    fn is_proc_time(&self, inner: &Select, e: &SqlExpr) -> bool {
        let (Some(name), [from]) = (ident_name(e), inner.from.as_slice()) else {
            return false;
        };
        let TableFactor::Table { name: table, .. } = &from.relation else {
            return false;
        };
        if self.is_named_query(table) {
            return false;
        }
        self.table(table).is_ok_and(|t| {
            t.columns.iter().any(|c| {
                matches!(c, ColumnDef::Computed { name: n, expr } if is_proctime(expr) && n.eq_ignore_ascii_case(&name))
            })
        })
    }
}

/// The prefix of the hidden columns that [`hide_rank_inputs`] adds.
const HIDDEN_RANK_INPUT: &str = "__rank_";

/// What ROW_NUMBER ranks by and the ranked subquery does not select as it is (an expression,
/// a column left out of the select list or whose name an alias takes, as Flink allows):
/// computed in the subquery as a hidden column `__rank_<n>`, which `spec` names instead.
fn hide_rank_inputs(s: &mut Select, spec: &mut sqlparser::ast::WindowSpec) {
    let wildcard = (s.projection.iter()).any(|p| {
        matches!(
            p,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    });
    let exprs = (spec.partition_by.iter_mut()).chain(spec.order_by.iter_mut().map(|o| &mut o.expr));
    let mut hidden = Vec::new();
    for e in exprs {
        // An expression the subquery selects by a name: that name.
        let named = s.projection.iter().find_map(|p| match p {
            SelectItem::ExprWithAlias { expr, alias } if expr == &*e => Some(alias.clone()),
            SelectItem::UnnamedExpr(x @ SqlExpr::CompoundIdentifier(p)) if x == &*e => {
                p.last().cloned()
            }
            _ => None,
        });
        if let Some(name) = named {
            *e = SqlExpr::Identifier(name);
            continue;
        }
        // A column of the subquery's FROM (as in SQL, not a select item's alias): selected
        // as it is when the select list names it without AS, or a wildcard covers it and no
        // alias takes its name for another value.
        let name = match &*e {
            SqlExpr::Identifier(i) => i.clone(),
            SqlExpr::CompoundIdentifier(p) if p.len() == 2 => p[1].clone(),
            _ => {
                hidden.push(e);
                continue;
            }
        };
        let same = |n: &str| n.eq_ignore_ascii_case(&name.value);
        let shadowed = (s.projection.iter())
            .any(|p| matches!(p, SelectItem::ExprWithAlias { alias, .. } if same(&alias.value)));
        let plain = matches!(&*e, SqlExpr::Identifier(_))
            && (s.projection.iter()).any(|p| {
                matches!(p, SelectItem::UnnamedExpr(x) if ident_name(x).is_some_and(|n| same(&n)))
            });
        if plain || (wildcard && !shadowed) {
            *e = SqlExpr::Identifier(name);
        } else {
            hidden.push(e);
        }
    }
    for (i, e) in hidden.into_iter().enumerate() {
        let name = sqlparser::ast::Ident::new(format!("{HIDDEN_RANK_INPUT}{i}"));
        s.projection.push(SelectItem::ExprWithAlias {
            expr: e.clone(),
            alias: name.clone(),
        });
        *e = SqlExpr::Identifier(name);
    }
}

/// `scope` without the columns [`hide_rank_inputs`] adds.
fn visible(scope: &[ScopeEntry]) -> Vec<ScopeEntry> {
    (scope.iter())
        .filter(|e| !e.name.starts_with(HIDDEN_RANK_INPUT))
        .cloned()
        .collect()
}

/// The select item `ROW_NUMBER() OVER (...) AS name`: (its position, the call, the name).
/// Other ranking functions are refused.
fn row_number_item(select: &Select) -> Result<Option<(usize, &Function, String)>> {
    for (i, item) in select.projection.iter().enumerate() {
        let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) = item else {
            continue;
        };
        let SqlExpr::Function(f) = e else { continue };
        if f.over.is_none() {
            continue;
        }
        let name = f.name.to_string().to_uppercase();
        match name.as_str() {
            "ROW_NUMBER" => {}
            "RANK" | "DENSE_RANK" => {
                return Err(plan_err(format!(
                    "{name}() OVER (...) is not supported: weir numbers rows with ROW_NUMBER(), whose ties it breaks by the rows' values; {RANK_SHAPES}"
                )))
            }
            _ => continue,
        }
        let SelectItem::ExprWithAlias { alias, .. } = item else {
            return Err(plan_err(format!(
                "name ROW_NUMBER() OVER (...) with AS (e.g. AS rownum) to bound it outside; {RANK_SHAPES}"
            )));
        };
        return Ok(Some((i, f, alias.value.clone())));
    }
    Ok(None)
}

/// The ranks `c` keeps, if it is a condition on the rank column: `rank <= N`, `< N`, `= N`,
/// `>= N`, `> N`, `BETWEEN a AND b` (an unbounded end is `u64::MAX`).
fn rank_bound(c: &SqlExpr, rank: &str) -> Result<Option<(u64, u64)>> {
    let is_rank = |e: &SqlExpr| ident_name(e).is_some_and(|n| n.eq_ignore_ascii_case(rank));
    let number = |e: &SqlExpr| -> Result<i64> {
        match e {
            SqlExpr::Value(v) => match &v.value {
                Value::Number(n, _) => n.parse::<i64>().ok(),
                _ => None,
            },
            _ => None,
        }
        .ok_or_else(|| {
            plan_err(format!(
                "`{c}`: weir bounds the rank by whole-number literals"
            ))
        })
    };
    let clamp = |n: i64| n.max(0) as u64;
    match c {
        SqlExpr::BinaryOp { left, op, right } if is_rank(left) || is_rank(right) => {
            // Written as `N >= rank`: the same bound the other way round.
            let (op, n) = if is_rank(left) {
                (op.clone(), number(right)?)
            } else {
                let flipped = match op {
                    BinaryOperator::Lt => BinaryOperator::Gt,
                    BinaryOperator::LtEq => BinaryOperator::GtEq,
                    BinaryOperator::Gt => BinaryOperator::Lt,
                    BinaryOperator::GtEq => BinaryOperator::LtEq,
                    other => other.clone(),
                };
                (flipped, number(left)?)
            };
            let bound = match op {
                BinaryOperator::LtEq => (1, clamp(n)),
                BinaryOperator::Lt => (1, clamp(n - 1)),
                BinaryOperator::Eq => (clamp(n), clamp(n)),
                BinaryOperator::GtEq => (clamp(n), u64::MAX),
                BinaryOperator::Gt => (clamp(n + 1), u64::MAX),
                other => {
                    return Err(plan_err(format!(
                        "`{c}`: weir bounds the rank with <=, <, =, >=, > or BETWEEN, not {other}"
                    )))
                }
            };
            Ok(Some(bound))
        }
        SqlExpr::Between {
            expr,
            negated: false,
            low,
            high,
        } if is_rank(expr) => Ok(Some((clamp(number(low)?), clamp(number(high)?)))),
        _ => Ok(None),
    }
}
