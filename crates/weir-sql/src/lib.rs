//! # weir-sql
//!
//! The SQL front end: jobs written in the Flink SQL dialect become weir job graphs. sqlparser
//! (the version DataFusion builds on) parses them with a Flink dialect ([`dialect`]) and an own
//! CREATE TABLE routine ([`parse`]); the planner ([`plan`]) maps tables to sources and sinks,
//! time-bounded joins to interval joins, `FOR SYSTEM_TIME AS OF` to temporal joins, window
//! table functions to window aggregations. Scalar expressions are planned and evaluated by
//! DataFusion ([`expr`]) in the [`calc`] operator, which this crate registers
//! ([`register`]) so that SQL jobs written out as JSON read back.

#![warn(clippy::unwrap_used)]
pub mod calc;
mod connectors;
pub mod dialect;
pub mod expr;
mod functions;
pub mod parse;
pub mod plan;
pub mod zone;

pub use plan::{plan_backfill, plan_job, with_suffix, BackfillOptions, BackfillPlan, PlanOptions};

/// Adds the SQL front end's operators to a registry, for job graphs read back from JSON.
pub fn register(r: &mut weir_runtime::Registry) {
    r.add_operator(calc::KIND, |s| {
        Ok(std::sync::Arc::new(weir_runtime::graph::spec_from_json::<
            calc::Calc,
        >(calc::KIND, s)?))
    });
}

/// Errors of the SQL front end: what the user must fix, with where and a hint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The text does not parse (with line and column).
    #[error("SQL syntax error: {0}")]
    Parse(String),
    /// The job parses but cannot be planned as written.
    #[error("{0}")]
    Plan(String),
    #[error(transparent)]
    Runtime(#[from] weir_runtime::Error),
}

impl From<weir_core::Error> for Error {
    fn from(e: weir_core::Error) -> Self {
        Error::Runtime(e.into())
    }
}

/// `Result` with the SQL front end's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
