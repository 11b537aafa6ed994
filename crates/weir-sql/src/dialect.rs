//! The Flink SQL dialect on sqlparser: Flink's identifiers and backquotes, `FOR SYSTEM_TIME AS
//! OF`, and a `TABLE t` argument inside window table functions (`TUMBLE(TABLE events, ...)`,
//! `SESSION(TABLE events PARTITION BY user, ...)`), which no stock dialect parses.

use sqlparser::ast::{Expr, Ident};
use sqlparser::dialect::Dialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// The marker a `TABLE t` argument becomes: `__table__.t`.
pub const TABLE_ARG: &str = "__table__";

#[derive(Debug, Default)]
pub struct FlinkDialect;

impl Dialect for FlinkDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_' || ch == '$'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`' || ch == '"'
    }

    fn supports_table_versioning(&self) -> bool {
        true
    }

    /// `COUNT(*) FILTER (WHERE ...)`.
    fn supports_filter_during_aggregation(&self) -> bool {
        true
    }

    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        // `TABLE events` as an argument: remember the table by name, and the columns of a
        // `PARTITION BY k` or `PARTITION BY (k1, k2)` after it (SESSION's): `__table__.t.k1.k2`.
        if parser.peek_keyword(Keyword::TABLE) {
            let next = parser.peek_nth_token(1);
            if let Token::Word(_) = next.token {
                let _ = parser.parse_keyword(Keyword::TABLE);
                return Some(table_argument(parser));
            }
        }
        None
    }
}

fn table_argument(parser: &mut Parser) -> Result<Expr, ParserError> {
    let mut parts = vec![Ident::new(TABLE_ARG), parser.parse_identifier()?];
    if parser.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
        if parser.consume_token(&Token::LParen) {
            parts.extend(parser.parse_comma_separated(|p| p.parse_identifier())?);
            parser.expect_token(&Token::RParen)?;
        } else {
            // One column: a comma after it starts the next argument (as in Flink).
            parts.push(parser.parse_identifier()?);
        }
    }
    Ok(Expr::CompoundIdentifier(parts))
}
