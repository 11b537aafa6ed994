//! `WITH` (common table expressions): named queries in scope while their query is planned,
//! each planned where it is used, as a view is (each use planned again, a time attribute it
//! selects kept; in FROM, in a join, in a window table function's `TABLE name`). A named query
//! sees the ones before it; a name it uses that is its own or a later one's is a table or view,
//! as in a WITH that is not RECURSIVE. An inner WITH's names hide the outer ones.
//!
//! Also the other name a query gives in FROM that is not a table's: a window table function's
//! (`FROM TABLE(TUMBLE(...)) AS c`).

use std::collections::HashSet;

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr as SqlExpr, Join, Query, SetExpr, TableAlias, TableFactor, VisitMut, VisitorMut, With,
};

use super::{plan_err, Planner, Rel, SqlScalar};
use crate::Result;

/// A named query in scope.
#[derive(Debug, Clone)]
pub(super) struct Named {
    /// As written, for the relation's name.
    pub name: String,
    pub query: Query,
}

impl Planner {
    /// Plans `q`, whose WITH names queries: they are in scope for its body.
    pub(super) fn query_with(&self, q: &Query, with: &With) -> Result<(Rel, Vec<SqlScalar>)> {
        if with.recursive {
            return Err(plan_err(
                "WITH RECURSIVE: a streaming job cannot plan a query that reads its own output; \
                 write the steps as separate named queries",
            ));
        }
        let mut seen = HashSet::new();
        let mut named = Vec::new();
        for cte in &with.cte_tables {
            let name = cte.alias.name.value.clone();
            if !seen.insert(name.to_lowercase()) {
                return Err(plan_err(format!(
                    "WITH names `{name}` twice; give each query its own name"
                )));
            }
            if !cte.alias.columns.is_empty() {
                return Err(plan_err(format!(
                    "WITH {}: name the columns in the query's SELECT list (expr AS name) \
                     rather than after the name",
                    cte.alias
                )));
            }
            named.push(Named {
                name,
                query: (*cte.query).clone(),
            });
        }
        let depth = self.ctes.borrow().len();
        self.ctes.borrow_mut().extend(named);
        let mut body = q.clone();
        body.with = None;
        let planned = self.query(&body);
        self.ctes.borrow_mut().truncate(depth);
        planned
    }

    /// Whether `name` is a WITH query in scope (it hides a table or view of that name).
    pub(super) fn is_named_query(&self, name: &sqlparser::ast::ObjectName) -> bool {
        let key = super::unquote(&name.to_string()).to_lowercase();
        name.0.len() == 1
            && self
                .ctes
                .borrow()
                .iter()
                .any(|n| n.name.to_lowercase() == key)
    }

    /// The named query `key` (lower case) in scope, innermost first: planned as a view named
    /// `alias`, with only the named queries before it in scope. `None` if no such name is in
    /// scope.
    pub(super) fn named_query(
        &self,
        key: &str,
        alias: &str,
        versioned: bool,
    ) -> Option<Result<Rel>> {
        let at = self
            .ctes
            .borrow()
            .iter()
            .rposition(|n| n.name.to_lowercase() == key)?;
        let named = self.ctes.borrow()[at].clone();
        if versioned {
            return Some(Err(plan_err(format!(
                "`{}` is a WITH query, read FOR SYSTEM_TIME AS OF: a temporal join reads a \
                 table or a view; make it a view (CREATE VIEW {} AS ...)",
                named.name, named.name
            ))));
        }
        let hidden = self.ctes.borrow_mut().split_off(at);
        let planned = self.view(&named.query, alias);
        self.ctes.borrow_mut().extend(hidden);
        Some(planned)
    }
}

/// `q`, whose single FROM item is a window table function named with AS (`FROM
/// TABLE(TUMBLE(...)) AS c`), with the name taken off and `c.col` read as `col`: the window
/// function's columns are all its FROM has, so they are the same columns.
///
/// # Errors
/// `Plan` for column names after the alias, or joins after the window function.
pub(super) fn unalias_window_tvf(q: &Query, alias: &TableAlias, joins: &[Join]) -> Result<Query> {
    if !alias.columns.is_empty() {
        return Err(plan_err(format!(
            "TABLE(...) AS {alias}: name the columns in the SELECT list (col AS name) rather than \
             after the alias"
        )));
    }
    if !joins.is_empty() {
        return Err(plan_err(format!(
            "TABLE(...) AS {}: a window table function joined in FROM is not planned; join \
             windowed subqueries on window_start and window_end (a window join)",
            alias.name
        )));
    }
    let name = alias.name.value.clone();
    let mut out = q.clone();
    let SetExpr::Select(select) = out.body.as_mut() else {
        return Err(plan_err("a window table function is read by a SELECT"));
    };
    if let Some(TableFactor::TableFunction { alias, .. }) =
        select.from.first_mut().map(|f| &mut f.relation)
    {
        *alias = None;
    }
    /// `alias.col` as `col`, outside subqueries (depth 0): those have FROM items of their own.
    struct Unqualify {
        alias: String,
        depth: usize,
    }
    impl VisitorMut for Unqualify {
        type Break = ();
        fn pre_visit_query(&mut self, _q: &mut Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _q: &mut Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
            if let (0, SqlExpr::CompoundIdentifier(parts)) = (self.depth, &*e) {
                if parts.len() == 2 && parts[0].value.eq_ignore_ascii_case(&self.alias) {
                    *e = SqlExpr::Identifier(parts[1].clone());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = select.visit(&mut Unqualify {
        alias: name,
        depth: 0,
    });
    Ok(out)
}
