//! Joins, recognised from their conditions: interval, temporal, lookup and regular joins.

use super::*;
use weir_operators::window_join::GIVEN_WINDOW_TIME;
use weir_operators::{ChangelogJoin, ChangelogJoinExt, WindowJoin, WindowJoinExt};

/// The column with the time of each pair of a join of changelogs (the later row's), numbered
/// per join.
const JOIN_TIME: &str = "__join_time";

impl Planner {
    /// The jdbc table that `relation` looks up at processing time, if it is one: such a
    /// table is queried per key (a lookup join), not read. Its columns as a relation whose
    /// stream is `left`'s (a stand-in: only its names are used).
    fn jdbc_lookup_table(
        &self,
        relation: &TableFactor,
        left: &Rel,
    ) -> Result<Option<(Rel, &TableDef, SqlExpr)>> {
        let TableFactor::Table {
            name,
            alias,
            version: Some(TableVersion::ForSystemTimeAsOf(v)),
            ..
        } = relation
        else {
            return Ok(None);
        };
        if self
            .views
            .contains_key(&unquote(&name.to_string()).to_lowercase())
            || self.is_named_query(name)
        {
            return Ok(None);
        }
        let t = self.table(name)?;
        let at_proc_time = ident_name(v).is_some_and(|n| {
            left.proc_time_attrs
                .iter()
                .any(|p| p.eq_ignore_ascii_case(&n))
        });
        if !connectors::is_jdbc(t) || !at_proc_time {
            return Ok(None);
        }
        let alias = alias
            .as_ref()
            .map(|a| a.name.value.clone())
            .unwrap_or_else(|| t.name.clone());
        let scope = physical_columns(t)?
            .into_iter()
            .map(|(n, _)| ScopeEntry {
                qualifier: Some(alias.clone()),
                name: n.clone(),
                column: n,
            })
            .collect();
        Ok(Some((
            Rel {
                stream: left.stream.clone(),
                scope,
                time_columns: Vec::new(),
                proc_time_attrs: Vec::new(),
                primary_key: t.primary_key.iter().map(|k| table_column(t, k)).collect(),
                upsert_keys: None,
                changes: None,
                alias,
                zone: left.zone.clone(),
            },
            t,
            v.clone(),
        )))
    }

    pub(super) fn join(&self, left: Rel, j: &sqlparser::ast::Join) -> Result<Rel> {
        let (right, version, jdbc) = match self.jdbc_lookup_table(&j.relation, &left)? {
            Some((rel, t, version)) => (rel, Some(version), Some(t)),
            None => {
                let (r, v) = self.table_factor(&j.relation)?;
                (r, v, None)
            }
        };
        // Updating inputs (changelogs) join in a regular join of changelogs, each taking
        // replaced rows back (a GROUP BY's upserts normalized first).
        for r in [&left, &right] {
            if r.upsert_keys.is_some() && r.changes.is_none() {
                return Err(plan_err(
                    "joining these updates is not supported: they do not say which row each replaces",
                ));
            }
        }
        let updating = left.changes.is_some() || right.changes.is_some();
        let (left, right) = (self.retracting(left)?, self.retracting(right)?);
        let (jt, on) = match &j.join_operator {
            JoinOperator::Join(JoinConstraint::On(e))
            | JoinOperator::Inner(JoinConstraint::On(e)) => (JoinType::Inner, e),
            JoinOperator::Left(JoinConstraint::On(e))
            | JoinOperator::LeftOuter(JoinConstraint::On(e)) => (JoinType::Left, e),
            JoinOperator::Right(JoinConstraint::On(e))
            | JoinOperator::RightOuter(JoinConstraint::On(e)) => (JoinType::Right, e),
            JoinOperator::FullOuter(JoinConstraint::On(e)) => (JoinType::Full, e),
            other => {
                return Err(plan_err(format!(
                    "join `{other:?}` is not supported; use [LEFT|RIGHT|FULL] JOIN ... ON"
                )))
            }
        };
        let mut conjuncts = Vec::new();
        split_and(on, &mut conjuncts);
        let (mut lkeys, mut rkeys, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        for c in conjuncts {
            if let SqlExpr::BinaryOp {
                left: a,
                op: BinaryOperator::Eq,
                right: b,
            } = c
            {
                let sides = (side_of(a, &left, &right), side_of(b, &left, &right));
                match sides {
                    (Some((0, x)), Some((1, y))) => {
                        lkeys.push(x);
                        rkeys.push(y);
                        continue;
                    }
                    (Some((1, y)), Some((0, x))) => {
                        lkeys.push(x);
                        rkeys.push(y);
                        continue;
                    }
                    _ => {}
                }
            }
            rest.push(c.clone());
        }
        if lkeys.is_empty() {
            return Err(plan_err(format!(
                "join ON {on}: weir needs at least one key equality between the two sides"
            )));
        }
        // Event times of two kinds (instants, local times) meet only through the zone; Flink
        // refuses such interval and temporal joins in any zone.
        if let (Some(l), Some(r)) = (left.local_event_time(), right.local_event_time()) {
            if l != r && !left.zone.is_utc() {
                let kind = |local: bool| {
                    if local {
                        "a TIMESTAMP"
                    } else {
                        "a TIMESTAMP_LTZ"
                    }
                };
                return Err(plan_err(format!(
                    "join ON {on}: `{}`'s time attribute is {} and `{}`'s {}, whose times meet \
                     only by a conversion in the session time zone ('{}'), which weir does not \
                     make for event times (Flink refuses such joins); declare both tables' time \
                     attributes of one type",
                    left.alias,
                    kind(l),
                    right.alias,
                    kind(r),
                    left.zone
                )));
            }
        }
        // What ON says besides keys (and, for interval and regular joins, time bounds).
        let window = window_keys(&lkeys, &rkeys);
        let (bounds, residual) = if version.is_none() && window.is_none() {
            time_bounds(&rest, &left, &right)?
        } else {
            (None, rest)
        };
        let (left, right, post) = place_residual(
            jt,
            left,
            right,
            residual,
            version.is_some() || jdbc.is_some(),
        )?;
        let aliases = (left.alias.clone(), right.alias.clone());
        let rschema = match jdbc {
            Some(t) => connectors::columns_schema(&physical_columns(t)?),
            None => right.stream.schema(),
        };
        let (stream, lschema) = (left.stream.clone(), left.stream.schema());
        let lookup = version.as_ref().is_some_and(|v| {
            ident_name(v).is_some_and(|n| {
                left.proc_time_attrs
                    .iter()
                    .any(|p| p.eq_ignore_ascii_case(&n))
            })
        });
        if updating && (version.is_some() || window.is_some() || bounds.is_some()) {
            return Err(plan_err(format!(
                "joining `{}` and `{}`: a side's rows are updates (from {}), which weir joins only in a regular join (ON equates keys, with no time bound); a temporal, lookup, window or interval join needs append-only rows",
                aliases.0,
                aliases.1,
                [&left, &right]
                    .iter()
                    .filter_map(|r| r.changes.as_ref().map(|c| c.made_by.clone()))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )));
        }
        let join_time = updating.then(|| {
            let n = self.changelog_joins.get() + 1;
            self.changelog_joins.set(n);
            format!("{JOIN_TIME}_{n}")
        });
        let out = if let Some(join_time) = &join_time {
            let time = |rel: &Rel| {
                (rel.changes.as_ref())
                    .map(|c| c.time_column.clone())
                    .or_else(|| rel.stream.event_time())
            };
            let (Some(lt), Some(rt)) = (time(&left), time(&right)) else {
                return Err(plan_err(format!(
                    "joining `{}` and `{}`: a regular join of updating rows keeps its state in event time, and a side has none: declare a WATERMARK on its table",
                    aliases.0, aliases.1
                )));
            };
            let mut j = ChangelogJoin::new(OP_COLUMN, [&lt, &rt], join_time)
                .aliases(&aliases.0, &aliases.1)
                .join_type(jt);
            // As every regular join: without a TTL it would keep every row of an append-only
            // side, and every key its changelogs ever had, forever.
            let Some(ttl) = self.state_ttl_ms()? else {
                return Err(plan_err(format!(
                    "the regular join of `{}` and `{}` keeps every row of both sides forever, so its state grows without bound; give it a state TTL (`SET 'table.exec.state.ttl' = '1 h'`, in event time)",
                    aliases.0, aliases.1
                )));
            };
            j = j.with_ttl(ttl);
            stream
                .key_by(&lkeys)
                .changelog_join(&right.stream.key_by(&rkeys), j)
        } else if lookup {
            if let Some(t) = jdbc {
                if !matches!(jt, JoinType::Inner | JoinType::Left) {
                    return Err(plan_err(format!(
                        "lookup join with `{}`: a lookup join is [INNER] JOIN or LEFT JOIN",
                        t.name
                    )));
                }
                let join =
                    connectors::jdbc_lookup(t, self.job.default_parallelism(), &lkeys, &rkeys)?
                        .join_type(jt)
                        .aliases(&aliases.0, &aliases.1);
                use weir_operators::LookupJoinExt;
                stream.lookup_join(join)
            } else {
                let t = weir_operators::StreamTableJoin::new()
                    .join_type(jt)
                    .aliases(&aliases.0, &aliases.1);
                use weir_operators::StreamTableJoinExt;
                stream
                    .key_by(&lkeys)
                    .stream_table_join(&right.stream.key_by(&rkeys), t)
            }
        } else if let Some(v) = &version {
            if !left.is_time_attr(v) {
                return Err(plan_err(format!(
                    "FOR SYSTEM_TIME AS OF {v}: a temporal join looks versions up at the probe side's time attribute ({}), or at a PROCTIME() attribute for a lookup join",
                    left.time_attr_names()
                )));
            }
            // The versions are keyed by the PRIMARY KEY: ON equates exactly it (another
            // equality would look versions up per a different key).
            let pk_ok = right.primary_key.is_empty()
                || (right.primary_key.iter().all(|k| rkeys.contains(k))
                    && rkeys.iter().all(|k| right.primary_key.contains(k)));
            if !pk_ok {
                return Err(plan_err(format!(
                    "temporal join with `{}`: its PRIMARY KEY ({}) keys the versions, so ON must equate exactly it; ON equates ({}). Filter on other columns after the join",
                    right.alias,
                    right.primary_key.join(", "),
                    rkeys.join(", ")
                )));
            }
            let mut t = TemporalJoin::new()
                .join_type(jt)
                .aliases(&aliases.0, &aliases.1);
            // An upsert-kafka table's rows say which are deletes.
            if right.stream.schema().index_of(OP_COLUMN).is_ok() {
                t = t.op_column(OP_COLUMN);
            }
            stream
                .key_by(&lkeys)
                .temporal_join(&right.stream.key_by(&rkeys), t)
        } else if let Some((lk, rk)) = window {
            // Flink's window join: both sides' rows carry their windows, equated in ON.
            if lk.is_empty() {
                return Err(plan_err(
                    "window join: ON equates only the windows; weir needs a key equality too (all rows of a window would meet in one subtask)",
                ));
            }
            let mut j = WindowJoin::given_windows()
                .join_type(jt)
                .aliases(&aliases.0, &aliases.1);
            // Windows of local times over instants (see Planner::local_windows).
            if let Some(zone) = self.local_windows(&left).or(self.local_windows(&right)) {
                j = j.in_zone(zone.name());
            }
            let joined = stream.key_by(&lk).window_join(&right.stream.key_by(&rk), j);
            // Over TIMESTAMP attributes the window time is a local TIMESTAMP too (not instants
            // to read in the session zone again).
            match super::aggregate::window_time_type(&left, false) {
                Some(t) => super::aggregate::cast_column(&joined, GIVEN_WINDOW_TIME, &t),
                None => joined,
            }
        } else {
            match bounds {
                Some((lower, upper)) => {
                    let j = IntervalJoin::between(lower, upper)
                        .join_type(jt)
                        .aliases(&aliases.0, &aliases.1);
                    stream
                        .key_by(&lkeys)
                        .interval_join(&right.stream.key_by(&rkeys), j)
                }
                None => {
                    let ttl = self.state_ttl_ms()?;
                    let j = RegularJoin {
                        ttl_ms: ttl,
                        ..RegularJoin::unbounded()
                    }
                    .join_type(jt)
                    .aliases(&aliases.0, &aliases.1);
                    stream
                        .key_by(&lkeys)
                        .regular_join(&right.stream.key_by(&rkeys), j)
                }
            }
        };
        let (_, lnames, rnames) =
            join_schema(&lschema, &rschema, (&aliases.0, &aliases.1)).map_err(Error::Runtime)?;
        let rename =
            |rel: &Rel, names: &[String], schema: &arrow_schema::SchemaRef| -> Vec<ScopeEntry> {
                rel.scope
                    .iter()
                    .map(|e| {
                        let idx = schema.index_of(&e.column).unwrap_or(0);
                        ScopeEntry {
                            qualifier: e.qualifier.clone(),
                            name: e.name.clone(),
                            column: names[idx].clone(),
                        }
                    })
                    .collect()
            };
        let mut scope = rename(&left, &lnames, &lschema);
        scope.extend(rename(&right, &rnames, &rschema));
        // The joined rows' time attribute: that of the side whose event time the join's
        // output carries (none when an outer join may leave it NULL).
        let mapped = |rel: &Rel, names: &[String], schema: &arrow_schema::SchemaRef| {
            (rel.time_columns.iter())
                .filter_map(|c| schema.index_of(c).ok().map(|i| names[i].clone()))
                .collect::<Vec<_>>()
        };
        let time_columns = match out.event_time() {
            Some(et) => [
                mapped(&left, &lnames, &lschema),
                mapped(&right, &rnames, &rschema),
            ]
            .into_iter()
            .find(|cols| cols.contains(&et))
            .unwrap_or_else(|| vec![et]),
            None => Vec::new(),
        };
        // A join of changelogs: updates, in the changelog's kinds and its time column.
        let changes = join_time.map(|join_time| Changes {
            retracts: true,
            time_column: join_time,
            made_by: format!(
                "the {} join of `{}` and `{}`",
                match jt {
                    JoinType::Inner => "regular",
                    JoinType::Left => "left",
                    JoinType::Right => "right",
                    JoinType::Full => "full",
                },
                aliases.0,
                aliases.1
            ),
        });
        // An outer join's rows without a match have NULLs for the other side's key, which no
        // table keyed by it takes: they have no key. Nor has an inner join's unless a side's
        // key holds its join keys (as Flink's upsert keys of a join): else a pair's changes can
        // come from two subtasks (its rows moved to other join keys), in either order.
        // `a` holds every column of `b`.
        let holds = |a: &[String], b: &[String]| b.iter().all(|c| a.contains(c));
        let upsert_keys = match (updating, &left.upsert_keys, &right.upsert_keys) {
            (true, Some(l), Some(r)) if jt == JoinType::Inner => {
                // Every key column renamed as the join names it, or no key at all: a key
                // short of a column would merge rows that differ.
                let named =
                    |keys: &[String], names: &[String], schema: &arrow_schema::SchemaRef| {
                        (keys.iter())
                            .map(|k| schema.index_of(k).ok().map(|i| names[i].clone()))
                            .collect::<Option<Vec<_>>>()
                    };
                let (ln, rn) = (named(l, &lnames, &lschema), named(r, &rnames, &rschema));
                // A side's key orders the pairs' changes when it holds its join keys (its rows
                // never change subtask); it alone keys them when the other side's key is among
                // that side's join keys (a row meets at most one row there).
                let (l_orders, r_orders) = (holds(l, &lkeys), holds(r, &rkeys));
                if l_orders && holds(&rkeys, r) {
                    ln
                } else if r_orders && holds(&lkeys, l) {
                    rn
                } else if l_orders || r_orders {
                    ln.zip(rn).map(|(mut l, r)| {
                        l.extend(r);
                        l
                    })
                } else {
                    None
                }
            }
            _ => None,
        };
        let mut joined = Rel {
            primary_key: Vec::new(),
            upsert_keys,
            changes,
            proc_time_attrs: {
                let mut p = left.proc_time_attrs.clone();
                p.extend(right.proc_time_attrs.clone());
                p
            },
            stream: out,
            scope,
            time_columns,
            alias: format!("{}_{}", aliases.0, aliases.1),
            zone: left.zone.clone(),
        };
        // An inner join's other conditions: a filter on the joined rows.
        if !post.is_empty() {
            let all = crate::parse::balanced(post, &BinaryOperator::And);
            let pred = scalar(&all, &joined)?;
            joined.stream = joined
                .stream
                .apply("calc", Arc::new(crate::calc::Calc::filter(pred)));
        }
        Ok(joined)
    }
}

/// A window join's keys: when ON equates both sides' `window_start` and `window_end`, the
/// other equalities (left, right).
fn window_keys(lkeys: &[String], rkeys: &[String]) -> Option<(Vec<String>, Vec<String>)> {
    let equated = |c: &str| {
        lkeys
            .iter()
            .zip(rkeys)
            .any(|(l, r)| l.eq_ignore_ascii_case(c) && r.eq_ignore_ascii_case(c))
    };
    if !(equated("window_start") && equated("window_end")) {
        return None;
    }
    let window = |l: &String, r: &String| {
        ["window_start", "window_end"]
            .iter()
            .any(|c| l.eq_ignore_ascii_case(c) && r.eq_ignore_ascii_case(c))
    };
    Some(
        lkeys
            .iter()
            .zip(rkeys)
            .filter(|(l, r)| !window(l, r))
            .map(|(l, r)| (l.clone(), r.clone()))
            .unzip(),
    )
}

pub(super) fn split_and<'a>(e: &'a SqlExpr, out: &mut Vec<&'a SqlExpr>) {
    match e {
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            split_and(left, out);
            split_and(right, out);
        }
        SqlExpr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}

/// Which side of a join a column reference belongs to, and its stream column there.
pub(super) fn side_of(e: &SqlExpr, left: &Rel, right: &Rel) -> Option<(usize, String)> {
    let (q, n) = match e {
        SqlExpr::Identifier(i) => (None, i.value.clone()),
        SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
            (Some(p[0].value.clone()), p[1].value.clone())
        }
        _ => return None,
    };
    match (
        left.resolve(q.as_deref(), &n),
        right.resolve(q.as_deref(), &n),
    ) {
        (Ok(c), Err(_)) => Some((0, c)),
        (Err(_), Ok(c)) => Some((1, c)),
        _ => None,
    }
}

/// `side.time [+|- INTERVAL]` → (side, offset ms).
pub(super) fn time_term(e: &SqlExpr, left: &Rel, right: &Rel) -> Option<(usize, i64)> {
    let attr = |x: &SqlExpr| {
        if left.is_time_attr(x) {
            Some(0)
        } else if right.is_time_attr(x) {
            Some(1)
        } else {
            None
        }
    };
    match e {
        SqlExpr::BinaryOp {
            left: a,
            op: BinaryOperator::Plus,
            right: b,
        } => Some((attr(a)?, interval_ms(b).ok()?)),
        SqlExpr::BinaryOp {
            left: a,
            op: BinaryOperator::Minus,
            right: b,
        } => Some((attr(a)?, -interval_ms(b).ok()?)),
        SqlExpr::Nested(x) => time_term(x, left, right),
        x => Some((attr(x)?, 0)),
    }
}

/// Bounds on `right.t - left.t` in ms: (lower, upper), both included.
pub(super) type TimeBounds = (i64, i64);

/// The bounds on `right.t - left.t` that `conds` set, and the conditions that are not such
/// bounds.
pub(super) fn time_bounds(
    conds: &[SqlExpr],
    left: &Rel,
    right: &Rel,
) -> Result<(Option<TimeBounds>, Vec<SqlExpr>)> {
    let mut other = Vec::new();
    let (mut lower, mut upper): (Option<i64>, Option<i64>) = (None, None);
    // Records `a_side.t + a_off  OP  b_side.t + b_off`.
    let mut add = |a: (usize, i64), op: &str, b: (usize, i64)| -> bool {
        if a.0 == b.0 {
            return false;
        }
        // Normalise to (right - left) compared with a constant.
        // a - b OP (b_off - a_off), with a = left or right.
        let c = b.1 - a.1;
        let (diff_is_right_minus_left, op) = if a.0 == 1 { (true, op) } else { (false, op) };
        // a.t - b.t OP c. If a is right: right - left OP c. Else: left - right OP c, i.e.
        // right - left (flipped OP) -c.
        let (op, c) = if diff_is_right_minus_left {
            (op, c)
        } else {
            (
                match op {
                    ">=" => "<=",
                    "<=" => ">=",
                    ">" => "<",
                    "<" => ">",
                    o => o,
                },
                -c,
            )
        };
        match op {
            ">=" => lower = Some(lower.map_or(c, |l| l.max(c))),
            ">" => lower = Some(lower.map_or(c + 1, |l| l.max(c + 1))),
            "<=" => upper = Some(upper.map_or(c, |u| u.min(c))),
            "<" => upper = Some(upper.map_or(c - 1, |u| u.min(c - 1))),
            _ => return false,
        }
        true
    };
    // The conditions taken as bounds: kept, in case they bound one way only (then they are no
    // interval, and filter as any other condition does).
    let mut taken = Vec::new();
    for c in conds {
        let ok = match c {
            SqlExpr::Between {
                expr,
                negated: false,
                low,
                high,
            } => match (
                time_term(expr, left, right),
                time_term(low, left, right),
                time_term(high, left, right),
            ) {
                (Some(x), Some(lo), Some(hi)) => add(x, ">=", lo) && add(x, "<=", hi),
                _ => false,
            },
            SqlExpr::BinaryOp {
                left: a,
                op,
                right: b,
            } => {
                let op = match op {
                    BinaryOperator::GtEq => ">=",
                    BinaryOperator::Gt => ">",
                    BinaryOperator::LtEq => "<=",
                    BinaryOperator::Lt => "<",
                    _ => "",
                };
                match (time_term(a, left, right), time_term(b, left, right)) {
                    (Some(x), Some(y)) if !op.is_empty() => add(x, op, y),
                    _ => false,
                }
            }
            _ => false,
        };
        if ok {
            taken.push(c.clone());
        } else {
            other.push(c.clone());
        }
    }
    let bounds = match (lower, upper) {
        (Some(l), Some(u)) if l <= u => Some((l, u)),
        (Some(l), Some(u)) => {
            return Err(plan_err(format!(
                "the join's time bounds are empty: right - left in [{l}, {u}] ms"
            )))
        }
        _ => {
            other.extend(taken);
            None
        }
    };
    Ok((bounds, other))
}

/// The side (0 left, 1 right) every column of `e` is on; `None` when they are on both, when a
/// name is on neither or both, or when `e` reads no column.
fn side_of_all(e: &SqlExpr, left: &Rel, right: &Rel) -> Option<usize> {
    use std::ops::ControlFlow;
    let mut side = None;
    let mixed = sqlparser::ast::visit_expressions(e, |x| {
        if matches!(x, SqlExpr::Identifier(_) | SqlExpr::CompoundIdentifier(_)) {
            match (side_of(x, left, right), side) {
                (Some((s, _)), None) => side = Some(s),
                (Some((s, _)), Some(t)) if s == t => {}
                _ => return ControlFlow::Break(()),
            }
        }
        ControlFlow::Continue(())
    });
    side.filter(|_| mixed.is_continue())
}

/// Places the conditions of ON besides key equalities and time bounds. For an inner join they
/// filter the joined rows (returned, for after the join). For an outer join, a condition on the
/// side whose rows only ever appear matched (the right of a LEFT JOIN, the left of a RIGHT
/// JOIN) filters that side's rows before the join: the same rows match, and the others go
/// unmatched as they would. Any other condition of an outer join is refused, as is one on a
/// versioned or looked-up table (a filter there would pick another version).
fn place_residual(
    jt: JoinType,
    mut left: Rel,
    mut right: Rel,
    residual: Vec<SqlExpr>,
    versioned: bool,
) -> Result<(Rel, Rel, Vec<SqlExpr>)> {
    if residual.is_empty() || jt == JoinType::Inner {
        return Ok((left, right, residual));
    }
    for c in residual {
        let target = match (jt, side_of_all(&c, &left, &right)) {
            (JoinType::Left, Some(1)) if !versioned => &mut right,
            (JoinType::Right, Some(0)) => &mut left,
            _ => {
                let kind = match jt {
                    JoinType::Left => "LEFT",
                    JoinType::Right => "RIGHT",
                    _ => "FULL",
                };
                let takes = match (jt, versioned) {
                    (JoinType::Full, _) => "key equalities and time bounds only",
                    (_, true) => {
                        "key equalities only (a filter on the versioned or \
                                  looked-up table would pick other versions)"
                    }
                    _ => {
                        "key equalities, time bounds and conditions on the side whose rows \
                          appear only when matched"
                    }
                };
                return Err(plan_err(format!(
                    "{kind} JOIN ... ON `{c}`: this outer join's ON takes {takes}; with this \
                     condition the rows of the other side would still come out, unmatched: \
                     filter them in a subquery of that side, or move the condition to WHERE \
                     (which drops the unmatched rows too)"
                )));
            }
        };
        let pred = scalar(&c, target)?;
        target.stream = target
            .stream
            .apply("calc", Arc::new(crate::calc::Calc::filter(pred)));
    }
    Ok((left, right, Vec::new()))
}
