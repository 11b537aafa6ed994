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

/// Replaces `${name}` with its value; an unknown variable is an error naming it.
pub fn substitute(sql: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(i) = rest.find("${") {
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
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn perr(e: ParserError) -> Error {
    Error::Parse(e.to_string())
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
            out.push(JobStatement::CreateTable(Box::new(
                parse_create_table(&mut p).map_err(perr)?,
            )));
        } else {
            out.push(JobStatement::Other(Box::new(
                p.parse_statement().map_err(perr)?,
            )));
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
