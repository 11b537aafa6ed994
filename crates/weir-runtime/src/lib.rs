//! # weir-runtime
//!
//! The engine: job graphs and the builder API that makes them ([`JobBuilder`], [`Stream`]),
//! the synchronous [`Operator`] trait, credit-based [`channel`]s, the subtask loops on tokio
//! ([`exec`]), sources and sinks ([`source`], [`sink`]) and typed [`metrics`].
//!
//! Data moves as Arrow record batches ([`StreamBatch`]) with in-band control messages
//! ([`Message`]): watermarks, idleness, checkpoint barriers and end of input.
//!
//! ```
//! use std::sync::Arc;
//! use weir_core::expr::{col, lit};
//! use weir_core::SystemClock;
//! use weir_runtime::{exec, CollectSink, JobBuilder, SourceOptions};
//! use weir_runtime::testing::VecSource;
//!
//! let job = JobBuilder::new("evens");
//! let out = CollectSink::new();
//! job.source("numbers", VecSource::numbers(10), SourceOptions::event_time("ts", 0))
//!     .filter(col("n").rem(lit(2)).eq(lit(0)))
//!     .sink("out", out.clone());
//! let graph = job.build().unwrap();
//! let rt = exec::runtime().unwrap();
//! rt.block_on(exec::run(graph, Arc::new(SystemClock))).unwrap();
//! assert_eq!(out.rows(), 5);
//! ```

#![warn(clippy::unwrap_used)]
pub mod backfill;
pub mod batch;
pub mod builder;
pub mod channel;
pub mod checkpoint;
pub mod clock;
pub mod display;
pub mod error;
pub mod exec;
pub mod graph;
pub mod hotkeys;
pub mod location;
pub mod lookup;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod ops;
pub mod physical;
pub mod sink;
pub mod sort;
pub mod source;
pub mod testing;

pub use builder::{JobBuilder, KeyedStream, SourceOptions, Stream};
pub use clock::TokioClock;
pub use error::{Error, Result};
pub use graph::{JobConfig, JobGraph, OperatorFactory, Partitioning, Registry, StreamInfo};
pub use location::Location;
pub use message::{Message, StreamBatch};
pub use operator::{
    AsyncOperator, Context, Emit, Operator, Port, SharedBatch, SnapshotParts, StateBatches,
    StateSnapshot, SubtaskInfo, TimeDomain, Timer,
};
pub use sink::{
    BlackholeSink, CollectSink, RateLimitHandle, RateLimitedSink, SinkFactory, SinkWriter,
};
pub use source::{LogPartitions, SourceFactory, SourcePoll, SourceReader};
