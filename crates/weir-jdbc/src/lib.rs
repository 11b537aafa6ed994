//! # weir-jdbc
//!
//! Database tables in weir jobs, configured with the options of Flink's JDBC connector:
//! PostgreSQL (through its own protocol with tokio-postgres) and SQLite (a file, through
//! rusqlite with SQLite built in). A table is declared once and used in three roles: as a
//! sink, as the table of a lookup join, and as a bounded source. It sits beside
//! `weir-connectors`, on `weir-runtime`'s [`SinkFactory`](weir_runtime::SinkFactory) /
//! [`SinkWriter`](weir_runtime::SinkWriter), [`LookupTable`](weir_runtime::lookup::LookupTable)
//! and [`SourceFactory`](weir_runtime::SourceFactory) /
//! [`SourceReader`](weir_runtime::SourceReader) traits.
//!
//! - [`JdbcOptions`] reads the connection and sink options (`url`, `table-name`, `username`,
//!   `password` or `password-env`, `sink.buffer-flush.max-rows`, `sink.buffer-flush.interval`,
//!   `sink.max-retries`); the password is a [`Password`], shown as `***`.
//! - Options per role: [`CONNECTION_OPTIONS`], [`SINK_OPTIONS`], [`LOOKUP_OPTIONS`],
//!   [`SCAN_OPTIONS`]; [`KNOWN_OPTIONS`] is all of them, [`check_known`] refuses any other.
//!   Each role's `from_options` accepts the other roles' options and reads only its own.
//! - [`JdbcSinkFactory`] is the sink (kind `jdbc`): appends, or upserts by a primary key
//!   ([`JdbcSinkFactory::with_primary_key`]), deletes too when the stream carries a change
//!   column ([`JdbcSinkFactory::with_op_column`], `-D` deletes the key).
//! - [`JdbcLookupTable`] is a lookup join's table: one query per call for a batch of keys,
//!   over a pool of at most `max_concurrent` connections; [`LookupOptions`] reads Flink's
//!   `lookup.cache` / `lookup.partial-cache.*` / `lookup.max-retries` and weir's
//!   `lookup.max-concurrent-queries` and `lookup.timeout` for the lookup join's settings. See
//!   [`lookup`].
//! - [`JdbcSource`] is a bounded scan (source kind `jdbc`), split by `scan.partition.*` as
//!   Flink splits it, fetching `scan.fetch-size` rows at a time on a background task, with
//!   positions for checkpoints; [`ScanOptions`] reads the options. See [`source`].
//! - [`scan_text`] reads a whole table as text, a bounded number of rows at a time (for
//!   `weir validate`); [`repoint_view`] switches a view to another table in one transaction
//!   recorded in `weir_cutovers` (for `weir cutover`). See [`text`](crate::text).
//! - [`types`] maps Arrow types to the databases' and back; an existing table is checked
//!   against the declared columns (the sink creates a missing one; a lookup or scan refuses
//!   it), naming the column and both types.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use weir_jdbc::JdbcSinkFactory;
//!
//! let options: BTreeMap<String, String> = [
//!     ("url", "jdbc:postgresql://127.0.0.1:5432/shop"),
//!     ("table-name", "revenue"),
//!     ("username", "weir"),
//!     ("password-env", "SHOP_DB_PASSWORD"),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.to_string(), v.to_string()))
//! .collect();
//! let sink = JdbcSinkFactory::from_options(&options, "revenue-job", "revenue")?
//!     .with_primary_key(["shop"]);
//! # Ok::<(), weir_runtime::Error>(())
//! ```
//!
//! The same table as a lookup join's table, with the join's settings from its options:
//!
//! ```no_run
//! # use std::collections::BTreeMap;
//! # use std::sync::Arc;
//! use arrow_schema::{DataType, Field, Schema};
//! use weir_jdbc::{JdbcLookupTable, LookupOptions};
//!
//! let options: BTreeMap<String, String> = [
//!     ("url", "jdbc:postgresql://127.0.0.1:5432/shop"),
//!     ("table-name", "shops"),
//!     ("lookup.cache", "PARTIAL"),
//!     ("lookup.partial-cache.max-rows", "10000"),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.to_string(), v.to_string()))
//! .collect();
//! let lookup = LookupOptions::from_options(&options)?;
//! let columns = Arc::new(Schema::new(vec![
//!     Field::new("shop", DataType::Utf8, false),
//!     Field::new("region", DataType::Utf8, true),
//! ]));
//! let table = JdbcLookupTable::from_options(&options, columns, lookup.max_concurrent)?;
//! # Ok::<(), weir_runtime::Error>(())
//! ```
//!
//! # Writing
//!
//! A writer buffers rows and flushes them when `sink.buffer-flush.max-rows` are buffered, when
//! `sink.buffer-flush.interval` has passed since the last flush (checked as rows and watermarks
//! arrive: an idle stream's rows wait for the next barrier or the end), at each checkpoint
//! barrier and at the end of input. A flush is one transaction. Appends load rows with binary
//! `COPY` (PostgreSQL) or a prepared `INSERT` (SQLite). Upserts load the rows into a table of
//! the writer's and merge them into the target with `INSERT … ON CONFLICT (key) DO UPDATE`,
//! keeping the last row of each key; with a change column, a key whose last row is `-D` or
//! `-U` is deleted (a `-U` whose `+U` a filter dropped takes the key's row out, as in Flink's
//! upsert sinks), `+I` / `+U` are upserts, and a `-U` right before its key's `+U` is not
//! written.
//! This is how `group_aggregate` and `upsert-kafka` tables express a changing table.
//!
//! # Exactly once with checkpoints
//!
//! Without checkpoints each flush goes straight into the target table: a failed run leaves the
//! rows flushed so far, and running again writes them again (at least once). With checkpoints:
//!
//! 1. Rows are flushed into the writer's staging table `<table>__weir_staging_<8 hex digits>`
//!    (the digits hash the job's and the sink's names, so every job writing a table stages in
//!    a table of its own and none settles or deletes another's rows; the sink's columns plus
//!    `__weir_epoch`, `__weir_subtask`, `__weir_seq`, and `__weir_delete` with a change
//!    column), each tagged with the epoch it belongs to: the checkpoint whose barrier comes
//!    after it (the last barrier's number plus one).
//! 2. `pre_commit(n)` (the barrier of checkpoint `n`) flushes the buffer: the rows of epoch `n`
//!    are durable in staging before the checkpoint can complete.
//! 3. `commit_checkpoint(n)` (checkpoint `n` is complete) runs one transaction that moves the
//!    subtask's staging rows of epochs up to `n` into the target in `(epoch, subtask, seq)`
//!    order (upserts: the last row per key wins), deletes them from staging, and records `n`
//!    for `(job, sink, subtask)` in `weir_sink_progress`. Moving and deleting in one
//!    transaction makes a repeated commit harmless.
//! 4. A writer restored from checkpoint `N` first moves the staging rows of epochs up to `N` of
//!    every earlier subtask `s` with `s % parallelism == subtask` (pre-committed in a complete
//!    checkpoint, perhaps not moved before the crash) and deletes their later rows (the job
//!    replays those from `N`); a fresh start deletes the leftovers of its subtasks. So a kill at
//!    any point leaves the target as an uninterrupted run would have, at any parallelism.
//! 5. At the end of a bounded input, `finish` flushes and `commit` moves everything left.
//!    `abort` leaves staging as it is: the next start cleans it up.
//!
//! The staging table belongs to one writer (job and sink) of its target table, so several jobs
//! may write one table with checkpoints; two sinks of one job writing one table are refused
//! when the job is planned, and two runs of one job at once must not share a table. Rows
//! staged by a weir before this naming (in `<table>__weir_staging`) are not settled by a
//! restore: move them by hand, or restart such a job without `--restore`. A restore from a
//! checkpoint older than the last one committed cannot take back rows already moved; the
//! writer logs a warning.
//!
//! # Errors and retries
//!
//! A transient connection error (a refused or dropped connection, a serialization failure, a
//! server shutting down, SQLite busy) is retried up to `sink.max-retries` times with a growing
//! pause, reconnecting first; then the error names the database (host, port and database, or
//! the file: never the password) and the table. A table whose columns do not fit the sink's
//! schema is refused at start, naming the column and both types.

#![warn(clippy::unwrap_used)]
pub mod lookup;
pub mod options;
mod plan;
mod pool;
mod postgres;
mod read;
mod roles;
mod sink;
pub mod source;
mod sqlite;
pub mod text;
pub mod types;

pub use lookup::{JdbcLookupSpec, JdbcLookupTable, LookupOptions, PartialCache};
pub use options::{
    check_known, Database, JdbcOptions, Password, PostgresUrl, TableName, CONNECTION_OPTIONS,
    KNOWN_OPTIONS, LOOKUP_OPTIONS, SCAN_OPTIONS, SINK_OPTIONS,
};
pub use sink::{
    register, staging_table_name, JdbcSinkFactory, JdbcSinkSpec, PROGRESS_TABLE, STAGING_SUFFIX,
};
pub use source::{JdbcSource, JdbcSourceSpec, ScanOptions, ScanPartition};
pub use text::{
    cutovers, repoint_view, scan_text, table_name, view_target, Cutover, ViewTarget, CUTOVERS_TABLE,
};
