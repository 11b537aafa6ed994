//! Names in queries: the relation being planned, the names that reach its columns, and
//! expressions over them.

use super::*;

/// A column reachable by a name in a query: `qualifier.name` is `column` of the stream.
#[derive(Debug, Clone)]
pub(super) struct ScopeEntry {
    pub(super) qualifier: Option<String>,
    pub(super) name: String,
    pub(super) column: String,
}

/// A relation being planned: a stream and the names that reach its columns.
#[derive(Clone)]
pub(super) struct Rel {
    pub(super) stream: Stream,
    pub(super) scope: Vec<ScopeEntry>,
    /// The stream's columns that carry its event time: the event-time column and its
    /// TIMESTAMP twins (the WATERMARK column and what it stands for). A name that resolves to
    /// one of them is a time attribute.
    pub(super) time_columns: Vec<String>,
    /// Names of processing-time attributes (`name AS PROCTIME()`): joining `FOR SYSTEM_TIME AS
    /// OF` one is a lookup join.
    pub(super) proc_time_attrs: Vec<String>,
    /// The stream columns of the table's PRIMARY KEY (a versioned table's key).
    pub(super) primary_key: Vec<String>,
    /// For the updates of a GROUP BY without a window: the columns that key them (a later row
    /// of a key replaces the earlier one).
    pub(super) upsert_keys: Option<Vec<String>>,
    /// The stream is a changelog: each row's change kind is in [`OP_COLUMN`] (`+I`, `-U`,
    /// `+U`, `-D`), which no name in the scope reaches; a plain GROUP BY's upserts have no
    /// such column (every row a `+U`).
    pub(super) changes: Option<Changes>,
    pub(super) alias: String,
    /// The session time zone, in which its TIMESTAMP_LTZ values read as local times.
    pub(super) zone: SessionZone,
}

/// The hidden column a changelog relation's event time is kept in when its SELECT list does
/// not keep the column itself.
pub(super) const CHANGE_TIME: &str = "__change_time";

/// What an updating relation's rows say besides their columns.
#[derive(Clone, Debug)]
pub(super) struct Changes {
    /// `-U` rows take back rows that came before (a retracting changelog, which a GROUP BY
    /// aggregates as it is); else the rows are upserts by `upsert_keys` (`-D` deleting a key),
    /// which a GROUP BY takes after `changelog_normalize`.
    pub(super) retracts: bool,
    /// The column with each row's event time, in which a key's TTL runs.
    pub(super) time_column: String,
    /// What makes the updates, for messages ("the GROUP BY k without a window").
    pub(super) made_by: String,
}

impl Rel {
    /// Whether its rows are updates (a GROUP BY's upserts, or a changelog), not events.
    pub(super) fn updates(&self) -> bool {
        self.upsert_keys.is_some() || self.changes.is_some()
    }

    /// Whether the stream's event time is a local time (a TIMESTAMP attribute): `Some(false)`
    /// for instants (a TIMESTAMP_LTZ, or the BIGINT epoch milliseconds behind one), `None`
    /// without event time.
    pub(super) fn local_event_time(&self) -> Option<bool> {
        let et = self.stream.event_time()?;
        let schema = self.stream.schema();
        let f = schema.field_with_name(&et).ok()?;
        Some(matches!(f.data_type(), DataType::Timestamp(_, None)))
    }

    pub(super) fn resolve(&self, qualifier: Option<&str>, name: &str) -> Result<String> {
        let hits: Vec<&ScopeEntry> = self
            .scope
            .iter()
            .filter(|e| e.name.eq_ignore_ascii_case(name))
            .filter(|e| {
                qualifier.is_none_or(|q| {
                    e.qualifier
                        .as_deref()
                        .is_some_and(|x| x.eq_ignore_ascii_case(q))
                })
            })
            .collect();
        match hits.as_slice() {
            [one] => Ok(one.column.clone()),
            [] => {
                let full = match qualifier {
                    Some(q) => format!("{q}.{name}"),
                    None => name.to_string(),
                };
                Err(plan_err(format!(
                    "unknown column `{full}`{}; columns here: {}",
                    did_you_mean(name, self.scope.iter().map(|e| e.name.as_str())),
                    self.scope
                        .iter()
                        .map(|e| match &e.qualifier {
                            Some(q) => format!("{q}.{}", e.name),
                            None => e.name.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
            many => {
                if many.windows(2).all(|w| w[0].column == w[1].column) {
                    Ok(many[0].column.clone())
                } else {
                    Err(plan_err(format!(
                        "column `{name}` is ambiguous: qualify it with a table alias"
                    )))
                }
            }
        }
    }

    /// Whether `e` names this relation's time attribute.
    pub(super) fn is_time_attr(&self, e: &SqlExpr) -> bool {
        let column = match e {
            SqlExpr::Identifier(i) => self.resolve(None, &i.value),
            SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
                self.resolve(Some(&p[0].value), &p[1].value)
            }
            _ => return false,
        };
        column.is_ok_and(|c| self.time_columns.contains(&c))
    }

    /// The names a user may write for the time attribute, for messages.
    pub(super) fn time_attr_names(&self) -> String {
        let names: Vec<String> = (self.scope.iter())
            .filter(|e| self.time_columns.contains(&e.column))
            .map(|e| match &e.qualifier {
                Some(q) => format!("{q}.{}", e.name),
                None => e.name.clone(),
            })
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// The names of a SELECT's output columns, in order: an alias, a column's own name, or the
/// expression's text; `*` stands for every column in scope.
pub(super) fn output_names(select: &Select, rel: &Rel) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::ExprWithAlias { alias, .. } => names.push(alias.value.clone()),
            SelectItem::UnnamedExpr(x) => {
                names.push(ident_name(x).unwrap_or_else(|| x.to_string()))
            }
            SelectItem::Wildcard(_) => names.extend(rel.scope.iter().map(|e| e.name.clone())),
            other => return Err(plan_err(format!("select item `{other}`: name it with AS"))),
        }
    }
    Ok(names)
}

pub(super) fn is_proctime(e: &SqlExpr) -> bool {
    matches!(e, SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case("PROCTIME"))
}

pub(super) fn is_ident(e: &SqlExpr, name: &str) -> bool {
    matches!(e, SqlExpr::Identifier(i) if i.value.eq_ignore_ascii_case(name))
}

pub(super) fn ident_name(e: &SqlExpr) -> Option<String> {
    match e {
        SqlExpr::Identifier(i) => Some(i.value.clone()),
        SqlExpr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()),
        _ => None,
    }
}

pub(super) fn function_args(a: &FunctionArguments) -> Result<Vec<SqlExpr>> {
    match a {
        FunctionArguments::None => Ok(Vec::new()),
        FunctionArguments::List(l) => l
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e.clone()),
                FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => Ok(SqlExpr::Wildcard(
                    sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                )),
                other => Err(plan_err(format!("argument `{other}` is not supported"))),
            })
            .collect(),
        FunctionArguments::Subquery(_) => Err(plan_err("subquery arguments are not supported")),
    }
}

/// The table alias of a qualified column reference.
pub(super) fn a_qualifier(e: &SqlExpr) -> Option<String> {
    match e {
        SqlExpr::CompoundIdentifier(p) if p.len() == 2 => Some(p[0].value.clone()),
        _ => None,
    }
}

/// A SQL expression over `rel`, for DataFusion: every name resolved to the stream's column.
pub(super) fn scalar(e: &SqlExpr, rel: &Rel) -> Result<SqlScalar> {
    scalar_with_aggs(e, rel, None)
}

/// [`scalar`], with aggregate calls (after a windowed GROUP BY) read from the aggregates'
/// output columns. The expression is planned here once, so that an unknown function or a
/// type error names the expression as the user wrote it.
pub(super) fn scalar_with_aggs(
    e: &SqlExpr,
    rel: &Rel,
    aggs: Option<&[(String, Aggregate)]>,
) -> Result<SqlScalar> {
    struct Resolve<'a> {
        rel: &'a Rel,
        aggs: Option<&'a [(String, Aggregate)]>,
        error: Option<Error>,
        /// The functions being visited, innermost last: (name, whether weir has it).
        calls: Vec<(String, bool)>,
    }
    impl VisitorMut for Resolve<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
            if let SqlExpr::Function(_) = e {
                self.calls.pop();
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
            // CURRENT_WATERMARK(rt): the column the Calc adds (see crate::calc).
            if let SqlExpr::Function(f) = &*e {
                if f.name.to_string().eq_ignore_ascii_case("CURRENT_WATERMARK") {
                    let args = function_args(&f.args).unwrap_or_default();
                    if let [a] = args.as_slice() {
                        if self.rel.is_time_attr(a) {
                            *e = SqlExpr::Identifier(Ident::with_quote(
                                '`',
                                crate::calc::CURRENT_WATERMARK,
                            ));
                            return ControlFlow::Continue(());
                        }
                    }
                }
            }
            // Before names resolve: `TIMESTAMPADD(MINUTE, ...)` names a unit, not a column.
            if let Err(m) = crate::functions::prepare(e) {
                self.error = Some(plan_err(m));
                return ControlFlow::Break(());
            }
            if let SqlExpr::Function(f) = e {
                let name = f.name.to_string();
                if agg_fn(&name).is_none() && !variance::is_statistic(&name) {
                    let known = crate::expr::is_scalar_function(&name);
                    self.calls.push((name, known));
                }
            }
            let column = match e {
                SqlExpr::Identifier(i) => self.rel.resolve(None, &i.value),
                SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
                    self.rel.resolve(Some(&p[0].value), &p[1].value)
                }
                SqlExpr::Function(f)
                    if agg_fn(&f.name.to_string()).is_some()
                        || (variance::is_statistic(&f.name.to_string()) && f.over.is_none()) =>
                {
                    let key = e.to_string();
                    match self.aggs.and_then(|a| a.iter().find(|(k, _)| *k == key)) {
                        Some((_, a)) => Ok(a.output.clone()),
                        None => Err(plan_err(format!(
                            "aggregate `{key}` outside a windowed GROUP BY"
                        ))),
                    }
                }
                _ => return ControlFlow::Continue(()),
            };
            match column {
                Ok(c) => {
                    *e = SqlExpr::Identifier(Ident::with_quote('`', c));
                    ControlFlow::Continue(())
                }
                Err(err) => {
                    // `TIMESTAMPADD(SECOND, ...)`: the function is what is missing, not a
                    // column named SECOND.
                    let unknown = self.calls.iter().find(|(_, known)| !known);
                    self.error = Some(match unknown {
                        Some((name, _)) => plan_err(crate::expr::unknown_function(name)),
                        None => err,
                    });
                    ControlFlow::Break(())
                }
            }
        }
    }
    let mut resolved = e.clone();
    let mut v = Resolve {
        rel,
        aggs,
        error: None,
        calls: Vec::new(),
    };
    let _ = resolved.visit(&mut v);
    if let Some(err) = v.error {
        return Err(err);
    }
    // The watermark is in the event time's own kind: for a TIMESTAMP attribute, local times
    // (the same milliseconds, as a TIMESTAMP).
    if rel.local_event_time() == Some(true) {
        let _ = sqlparser::ast::visit_expressions_mut(&mut resolved, |x| {
            if matches!(x, SqlExpr::Identifier(i) if i.value == crate::calc::CURRENT_WATERMARK) {
                let column = std::mem::replace(x, SqlExpr::value(sqlparser::ast::Value::Null));
                *x = crate::zone::as_local(column);
            }
            ControlFlow::<()>::Continue(())
        });
    }
    let schema = rel.stream.schema();
    let type_of = |x: &SqlExpr| {
        let planned = SqlScalar::new(x.to_string()).try_plan(&schema).ok()?;
        Some(planned.data_type().clone())
    };
    let fail = |m: String| plan_err(format!("`{e}`: {m}"));
    crate::zone::localize(&mut resolved, &rel.zone, &type_of).map_err(fail)?;
    let s = SqlScalar::new(resolved.to_string());
    s.try_plan_checked(&schema, |logical, df_schema| {
        crate::zone::refuse_zone_dependent(logical, df_schema, &rel.zone)
    })
    .map_err(fail)?;
    Ok(s)
}
