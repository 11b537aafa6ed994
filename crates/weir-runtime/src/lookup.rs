//! Tables a lookup join queries while it runs: a database table, looked up by key.
//!
//! A lookup sees the table as it is when the row is processed, so a replay may give another
//! answer (the lookup join says so in `weir explain`; the temporal join, which reads the
//! table's history as a stream, is the deterministic alternative).

use std::fmt;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::error::Result;
use crate::sink::BoxFuture;

/// A table that can be queried by key. Shared by the subtasks of a lookup join (each query
/// is independent), so it holds its connections behind `&self`.
pub trait LookupTable: Send + Sync + fmt::Debug {
    /// The registered kind, e.g. `jdbc`.
    fn kind(&self) -> &'static str;
    /// Settings as JSON, without secrets (passwords are never in a spec).
    fn spec(&self) -> serde_json::Value;
    /// The table's columns.
    fn schema(&self) -> SchemaRef;
    /// Where the table is, for messages: `postgresql://127.0.0.1:5432/db, table "ads"`
    /// (never a password).
    fn describe(&self) -> String;
    /// The rows whose `key_columns` equal one of the rows of `keys` (a batch of exactly those
    /// columns, with the table's types, distinct rows without NULLs), in any order, with all
    /// of the table's columns. One call is one query (or a few): the caller batches keys and
    /// bounds how many calls run at once.
    fn lookup(
        &self,
        key_columns: &[String],
        keys: RecordBatch,
    ) -> BoxFuture<'static, Result<RecordBatch>>;
}
