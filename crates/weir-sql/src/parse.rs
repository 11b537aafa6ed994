//! Splits a job file into statements: `CREATE TABLE` (with computed columns, `WATERMARK FOR`
//! and `WITH` options, parsed here on sqlparser's public methods), `CREATE VIEW`, `SET` and
//! `INSERT INTO ... SELECT` (sqlparser's own).

use std::collections::BTreeMap;

use sqlparser::ast::{DataType as SqlType, Expr as SqlExpr, Ident, Statement};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

use crate::dialect::FlinkDialect;
use crate::{Error, Result};

/// A column of a CREATE TABLE.
#[derive(Debug, Clone)]
pub enum ColumnDef {
    Physical {
        name: String,
        data_type: SqlType,
    },
    /// `name AS expr`
    Computed {
        name: String,
        expr: Box<SqlExpr>,
    },
}

/// A parsed CREATE TABLE.
#[derive(Debug, Clone)]
pub struct TableDef {
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// `WATERMARK FOR column AS expr`
    pub watermark: Option<(String, SqlExpr)>,
    pub primary_key: Vec<String>,
    pub options: BTreeMap<String, String>,
}

/// A statement of a job file.
#[derive(Debug, Clone)]
pub enum JobStatement {
    CreateTable(Box<TableDef>),
    Other(Box<Statement>),
}

/// Replaces `${name}` with its value; an unknown variable is an error naming it, and so is an
/// empty one (`--var output=` would turn `${output}/x.csv` into `/x.csv`). Inside a string
/// literal the value's quotes are escaped as SQL escapes them (`'` as `''`), so a value never
/// ends the literal and adds options; in a `--` comment any value without a line break
/// stands; elsewhere (a bare `${n}`) only a plain name, number or path may stand, and any
/// other value is refused, naming the variable.
pub fn substitute(sql: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    let (mut in_literal, mut in_comment) = (false, false);
    while let Some(i) = rest.find("${") {
        // Where the text before the variable leaves us: in a literal, a comment, or neither.
        let mut chars = rest[..i].chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\n' if in_comment => in_comment = false,
                '-' if !in_literal && !in_comment && chars.peek() == Some(&'-') => {
                    chars.next();
                    in_comment = true;
                }
                '\'' if !in_comment => {
                    if in_literal && chars.peek() == Some(&'\'') {
                        chars.next();
                    } else {
                        in_literal = !in_literal;
                    }
                }
                _ => {}
            }
        }
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| Error::Parse("unclosed `${` in the job file".into()))?;
        let name = &after[..end];
        let value = vars.get(name).ok_or_else(|| {
            Error::Parse(format!(
                "the job file uses `${{{name}}}` but no value was given: pass --var {name}=..."
            ))
        })?;
        if value.is_empty() {
            return Err(Error::Parse(format!(
                "the job file uses `${{{name}}}` and its value is empty: pass --var {name}=... with a value"
            )));
        }
        if in_literal {
            out.push_str(&value.replace('\'', "''"));
        } else if in_comment && !value.contains(['\n', '\r']) {
            // A comment ends only at a line's end.
            out.push_str(value);
        } else if value
            .chars()
            .all(|c| c.is_alphanumeric() || "_.-/:+@~".contains(c))
        {
            out.push_str(value);
        } else {
            return Err(Error::Parse(format!(
                "the job file uses `${{{name}}}` outside a string literal, where only a plain \
                 name, number or path may stand, and its value is {value:?}: quote it in the job \
                 file ('${{{name}}}') or pass a plain value"
            )));
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn perr(e: ParserError) -> Error {
    match e {
        ParserError::RecursionLimitExceeded => Error::Parse(
            "the statement nests parentheses, function calls or subqueries more than 50 deep \
             (the parser's limit); compute parts in a view or subquery and combine them"
                .into(),
        ),
        e => Error::Parse(e.to_string()),
    }
}

/// Whether the next tokens are these words (case-insensitive), consuming them if so.
fn words(p: &mut Parser, expected: &[&str]) -> bool {
    let all = expected.iter().enumerate().all(|(i, e)| {
        matches!(&p.peek_nth_token(i).token, Token::Word(w) if w.value.eq_ignore_ascii_case(e))
    });
    if all {
        for _ in expected {
            p.next_token();
        }
    }
    all
}

/// Parses every statement of a job file. Flink's statement sets (`EXECUTE STATEMENT SET BEGIN
/// ... END;` and the SQL client's `BEGIN STATEMENT SET; ... END;`) group INSERTs into one job,
/// which every weir job file is: their statements are read as if the set were not there.
pub fn parse_job(sql: &str) -> Result<Vec<JobStatement>> {
    let dialect = FlinkDialect;
    let mut p = Parser::new(&dialect).try_with_sql(sql).map_err(perr)?;
    let mut out = Vec::new();
    let mut in_set = false;
    loop {
        while p.consume_token(&Token::SemiColon) {}
        if p.peek_token().token == Token::EOF {
            if in_set {
                return Err(Error::Parse(
                    "a STATEMENT SET is not closed: END; is missing".into(),
                ));
            }
            break;
        }
        if words(&mut p, &["EXECUTE", "STATEMENT", "SET", "BEGIN"])
            || words(&mut p, &["BEGIN", "STATEMENT", "SET"])
        {
            in_set = true;
            continue;
        }
        if in_set && words(&mut p, &["END"]) {
            in_set = false;
            continue;
        }
        // `CREATE TEMPORARY TABLE` is a table of this job, as every table is.
        let temporary =
            matches!(&p.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::TEMPORARY);
        let table_at = if temporary { 2 } else { 1 };
        let is_create_table = p.peek_keyword(Keyword::CREATE)
            && matches!(&p.peek_nth_token(table_at).token, Token::Word(w) if w.keyword == Keyword::TABLE);
        if is_create_table {
            let mut t = parse_create_table(&mut p).map_err(perr)?;
            for c in &mut t.columns {
                if let ColumnDef::Computed { expr, .. } = c {
                    tame_expressions(expr)?;
                }
            }
            if let Some((_, e)) = &mut t.watermark {
                tame_expressions(e)?;
            }
            out.push(JobStatement::CreateTable(Box::new(t)));
        } else {
            let mut st = p.parse_statement().map_err(perr)?;
            tame_expressions(&mut st)?;
            out.push(JobStatement::Other(Box::new(st)));
        }
    }
    Ok(out)
}

fn ident(i: Ident) -> String {
    i.value
}

fn parse_create_table(p: &mut Parser) -> std::result::Result<TableDef, ParserError> {
    p.expect_keyword(Keyword::CREATE)?;
    let _ = p.parse_keyword(Keyword::TEMPORARY);
    p.expect_keyword(Keyword::TABLE)?;
    let _ = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = p
        .parse_object_name(false)?
        .to_string()
        .trim_matches('`')
        .to_string();
    p.expect_token(&Token::LParen)?;
    let mut columns = Vec::new();
    let mut watermark = None;
    let mut primary_key = Vec::new();
    loop {
        let is_watermark = matches!(&p.peek_token().token, Token::Word(w) if w.value.eq_ignore_ascii_case("WATERMARK"));
        if is_watermark {
            p.next_token();
            p.expect_keyword(Keyword::FOR)?;
            let col = ident(p.parse_identifier()?);
            p.expect_keyword(Keyword::AS)?;
            watermark = Some((col, p.parse_expr()?));
        } else if p.peek_keyword(Keyword::PRIMARY) || p.peek_keyword(Keyword::CONSTRAINT) {
            if let Some(sqlparser::ast::TableConstraint::PrimaryKey(pk)) =
                p.parse_optional_table_constraint()?
            {
                primary_key = pk
                    .columns
                    .iter()
                    .map(|c| c.to_string().trim_matches('`').to_string())
                    .collect();
            }
        } else {
            let name = ident(p.parse_identifier()?);
            if p.parse_keyword(Keyword::AS) {
                columns.push(ColumnDef::Computed {
                    name,
                    expr: Box::new(p.parse_expr()?),
                });
            } else {
                let data_type = p.parse_data_type()?;
                // NOT NULL / NULL, as Flink allows, are accepted and not kept.
                let _ = p.parse_keywords(&[Keyword::NOT, Keyword::NULL])
                    || p.parse_keyword(Keyword::NULL);
                columns.push(ColumnDef::Physical { name, data_type });
            }
        }
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    p.expect_token(&Token::RParen)?;
    let mut options = BTreeMap::new();
    if p.parse_keyword(Keyword::WITH) {
        p.expect_token(&Token::LParen)?;
        loop {
            let k = p.parse_literal_string()?;
            p.expect_token(&Token::Eq)?;
            let v = p.parse_literal_string()?;
            options.insert(k, v);
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
        p.expect_token(&Token::RParen)?;
    }
    Ok(TableDef {
        name,
        columns,
        watermark,
        primary_key,
        options,
    })
}

/// The deepest an expression may nest, in operators and parentheses: a chain of 300 `+` nests
/// 300 deep. Planning a deep expression costs time quadratic in its depth (DataFusion's type
/// coercion) and stack; past this depth a job is refused with the fix.
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// Chains of one AND or OR longer than this are rebalanced (see [`tame_expressions`]).
const BALANCE_FROM_TERMS: usize = 16;

/// Makes the expressions of a statement safe to plan: long chains of one AND or OR (which a
/// program writing SQL produces: `k = 1 OR k = 2 OR ...`) become balanced trees, which is
/// exact (both are associative, also for NULL) and nests `log2(terms)` deep instead of
/// `terms`; any other expression deeper than [`MAX_EXPRESSION_DEPTH`] is refused, naming its
/// depth. Never recurses deeper than that bound, so it is safe on any input.
///
/// # Errors
/// `Parse` for an expression nested too deep.
pub fn tame_expressions<V: sqlparser::ast::VisitMut>(node: &mut V) -> Result<()> {
    let mut v = Tame {
        depth: 0,
        error: None,
    };
    let _ = node.visit(&mut v);
    match v.error {
        Some(e) => Err(Error::Parse(e)),
        None => Ok(()),
    }
}

struct Tame {
    depth: usize,
    error: Option<String>,
}

impl sqlparser::ast::VisitorMut for Tame {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut SqlExpr) -> std::ops::ControlFlow<()> {
        balance_and_or(e);
        self.depth += 1;
        if self.depth > MAX_EXPRESSION_DEPTH {
            let (op, chain) = left_chain(e);
            self.error = Some(format!(
                "an expression nests {} levels deep (a chain of `{op}`); weir plans \
                 expressions up to {MAX_EXPRESSION_DEPTH} levels: compute parts in a view or \
                 subquery and combine them, or test one column against many values with \
                 `column IN (...)`",
                self.depth - 1 + chain
            ));
            // Dropping a deep tree recurses as deep as it is: take it apart here instead.
            dismantle(std::mem::replace(e, null()));
            return std::ops::ControlFlow::Break(());
        }
        std::ops::ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _e: &mut SqlExpr) -> std::ops::ControlFlow<()> {
        self.depth -= 1;
        std::ops::ControlFlow::Continue(())
    }
}

/// The operator of the binary chain down `e`'s left side, and how many of it there are;
/// walks the chain without recursion.
fn left_chain(e: &SqlExpr) -> (String, usize) {
    let mut n = 0;
    let mut op = String::new();
    let mut cur = e;
    while let SqlExpr::BinaryOp { left, op: o, .. } = cur {
        if n == 0 {
            op = o.to_string();
        }
        n += 1;
        cur = left;
    }
    (op, n)
}

/// Rebuilds a long left-deep chain of one AND or OR as a balanced tree (parenthesised, so that
/// its text parses back to the same shape).
fn balance_and_or(e: &mut SqlExpr) {
    use sqlparser::ast::BinaryOperator::{And, Or};
    let op = match e {
        SqlExpr::BinaryOp {
            op: op @ (And | Or),
            ..
        } => op.clone(),
        _ => return,
    };
    let (_, chain) = left_chain(e);
    if chain < BALANCE_FROM_TERMS {
        return;
    }
    let mut terms = Vec::with_capacity(chain + 1);
    let mut cur = std::mem::replace(e, null());
    loop {
        match cur {
            SqlExpr::BinaryOp { left, op: o, right } if o == op => {
                terms.push(*right);
                cur = *left;
            }
            other => {
                terms.push(other);
                break;
            }
        }
    }
    terms.reverse();
    *e = balanced(terms, &op);
}

/// `terms` joined by `op` as a balanced tree (no deeper than log2 of their number).
pub(crate) fn balanced(mut terms: Vec<SqlExpr>, op: &sqlparser::ast::BinaryOperator) -> SqlExpr {
    if terms.len() == 1 {
        return terms.pop().expect("one term");
    }
    let right = terms.split_off(terms.len() / 2);
    let nest = |x: SqlExpr| match x {
        x @ SqlExpr::BinaryOp { .. } => SqlExpr::Nested(Box::new(x)),
        x => x,
    };
    SqlExpr::BinaryOp {
        left: Box::new(nest(balanced(terms, op))),
        op: op.clone(),
        right: Box::new(nest(balanced(right, op))),
    }
}

fn null() -> SqlExpr {
    SqlExpr::Value(sqlparser::ast::Value::Null.into())
}

/// Drops an expression of any depth without recursion.
fn dismantle(e: SqlExpr) {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match e {
            SqlExpr::BinaryOp { left, right, .. } => {
                stack.push(*left);
                stack.push(*right);
            }
            SqlExpr::Nested(x) | SqlExpr::UnaryOp { expr: x, .. } => stack.push(*x),
            _ => {}
        }
    }
}
