//! # weir-operators
//!
//! Stateful stream operators, one per file, each with three names: the builder method
//! (`count`), the spec stored in the job graph (`Count`) and the per-subtask runtime struct
//! (`CountOp`). Builder methods come as extension traits on the runtime's streams.
//!
//! ```
//! use weir_operators::KeyedStreamExt;
//! # use weir_runtime::{JobBuilder, CollectSink, SourceOptions, testing::VecSource};
//! # let job = JobBuilder::new("doc");
//! # let events = job.source("numbers", VecSource::numbers(10), SourceOptions::none());
//! let counts = events.key_by(&["n"]).count();
//! # counts.sink("out", CollectSink::new());
//! # job.build().unwrap();
//! ```

#![warn(clippy::unwrap_used)]
pub mod aggregates;
pub mod changelog_join;
pub mod changelog_normalize;
pub mod count;
pub mod deduplicate;
#[cfg(feature = "rocksdb")]
mod disk_keys;
pub mod group_aggregate;
mod held_rows;
pub mod interval_join;
pub mod join;
mod join_rows;
pub mod lag;
pub mod local_time;
pub mod lookup_join;
pub mod over_aggregate;
pub mod regular_join;
mod retractable;
#[cfg(feature = "rocksdb")]
mod store_snapshot;
pub mod stream_table_join;
pub mod temporal_join;
#[cfg(feature = "rocksdb")]
mod timed_groups;
pub mod top_n;
pub mod unnest;
pub mod window_aggregate;
pub mod window_join;
pub mod window_rank;
pub mod windowed;
mod windows;

/// Whether the interval join can keep its state on disk (the `rocksdb` feature). weir-state's
/// own feature alone gives the store but not the operator that uses it.
pub const ROCKSDB_BUILT: bool = cfg!(feature = "rocksdb");

/// The refusal of state on disk by a weir built without RocksDB (the `rocksdb` feature).
#[cfg(not(feature = "rocksdb"))]
fn no_disk_state() -> weir_runtime::Error {
    weir_runtime::Error::config(
        "state.backend.type",
        "rocksdb",
        "this weir was built without RocksDB (the `rocksdb` feature)",
    )
}

pub use changelog_join::{ChangelogJoin, ChangelogJoinExt, ChangelogJoinOp};
pub use changelog_normalize::{ChangelogNormalize, ChangelogNormalizeExt, ChangelogNormalizeOp};
pub use count::{Count, CountOp};
pub use deduplicate::{Deduplicate, DeduplicateExt, DeduplicateOp, Keep};
pub use group_aggregate::{GroupAggregate, GroupAggregateExt, GroupAggregateOp};
pub use interval_join::{IntervalJoin, IntervalJoinExt, IntervalJoinOp};
pub use join::JoinType;
pub use lag::{Lag, LagExt, LagOf, LagOp};
pub use local_time::{LocalTime, LocalTimeExt, LocalTimeOp};
pub use lookup_join::{LookupCache, LookupJoin, LookupJoinExt, LookupJoinOp};
pub use over_aggregate::{Frame, OverAggregate, OverAggregateExt, OverAggregateOp};
pub use regular_join::{RegularJoin, RegularJoinExt};
pub use stream_table_join::{StreamTableJoin, StreamTableJoinExt, StreamTableJoinOp};
pub use temporal_join::{TemporalJoin, TemporalJoinExt, TemporalJoinOp};
pub use top_n::{TopN, TopNExt, TopNOp};
pub use unnest::{Unnest, UnnestExt, UnnestOp};
pub use window_aggregate::{Phase, Window, WindowAggregate, WindowAggregateOp};
pub use window_join::{WindowJoin, WindowJoinExt, WindowJoinOp};
pub use window_rank::{RankOrder, WindowRank, WindowRankExt, WindowRankOp};
pub use windowed::{Windowed, WindowedExt, WindowedOp};

use std::sync::Arc;
use weir_runtime::graph::{spec_from_json, Registry};
use weir_runtime::{KeyedStream, Stream};

/// Builder methods for keyed streams.
pub trait KeyedStreamExt {
    /// Counts rows per key; emits `(key columns..., count)` at the end of input.
    #[track_caller]
    fn count(&self) -> Stream;
}

impl KeyedStreamExt for KeyedStream {
    #[track_caller]
    fn count(&self) -> Stream {
        let at = weir_runtime::builder::caller_location();
        self.apply_at(
            "count".into(),
            Arc::new(Count {
                keys: self.keys().to_vec(),
            }),
            at,
        )
    }
}

/// How an aggregation is spread over subtasks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AggStrategy {
    /// All rows of a key meet in one subtask.
    OnePhase,
    /// Each upstream subtask pre-aggregates its rows (flushed at every watermark and on a size
    /// bound), then partial states are merged by key.
    TwoPhase,
    /// Rows are spread over `salts` subtasks per key (hot keys only with `hot_share`), partially
    /// aggregated there, then merged by key.
    Salted { salts: u16, hot_share: Option<f64> },
}

/// Builder methods for aggregations on keyed streams.
pub trait AggregateExt {
    /// A windowed aggregation in one phase.
    #[track_caller]
    fn window_aggregate(&self, agg: WindowAggregate) -> Stream;
    /// A windowed aggregation with the given strategy. Two-phase and salted plans are refused
    /// (when the job is built) for aggregates that do not combine, such as a median.
    #[track_caller]
    fn window_aggregate_with(&self, agg: WindowAggregate, strategy: AggStrategy) -> Stream;
}

impl AggregateExt for KeyedStream {
    #[track_caller]
    fn window_aggregate(&self, agg: WindowAggregate) -> Stream {
        let at = weir_runtime::builder::caller_location();
        aggregate_at(self, agg, AggStrategy::OnePhase, at)
    }

    #[track_caller]
    fn window_aggregate_with(&self, agg: WindowAggregate, strategy: AggStrategy) -> Stream {
        let at = weir_runtime::builder::caller_location();
        aggregate_at(self, agg, strategy, at)
    }
}

fn aggregate_at(
    keyed: &KeyedStream,
    mut agg: WindowAggregate,
    strategy: AggStrategy,
    at: String,
) -> Stream {
    agg.keys = keyed.keys().to_vec();
    let phase = |p: Phase| WindowAggregate {
        phase: p,
        ..agg.clone()
    };
    match strategy {
        AggStrategy::OnePhase => {
            keyed.apply_at("window_aggregate".into(), Arc::new(phase(Phase::Full)), at)
        }
        AggStrategy::TwoPhase => keyed
            .stream()
            .apply_with(
                "window_aggregate (partial)".into(),
                Arc::new(phase(Phase::Partial)),
                weir_runtime::Partitioning::Forward,
                at.clone(),
            )
            .key_by(keyed.keys())
            .apply_at("window_aggregate".into(), Arc::new(phase(Phase::Final)), at),
        AggStrategy::Salted { salts, hot_share } => keyed
            .apply_salted_at(
                "window_aggregate (partial)".into(),
                Arc::new(phase(Phase::Partial)),
                salts,
                hot_share,
                at.clone(),
            )
            .key_by(keyed.keys())
            .apply_at("window_aggregate".into(), Arc::new(phase(Phase::Final)), at),
    }
}

/// Registers this crate's operators, so job graphs using them can be read from JSON.
/// How long a key's state lives after its last row, for a plan: `until <ttl> ms of event time
/// pass without <without> (TTL)`, or to the end of the input for a batch job's
/// ([`weir_core::time::TTL_END_OF_INPUT_MS`]).
/// The place of change column `name` in `schema`, which must be STRING (`+I`, `-U`, `+U`,
/// `-D`); `setting` names the option that gave it.
pub(crate) fn change_column_index(
    schema: &arrow_schema::SchemaRef,
    setting: &str,
    name: &str,
) -> weir_runtime::Result<usize> {
    let i = schema.index_of(name).map_err(|_| {
        weir_runtime::Error::config(
            setting,
            name,
            format!(
                "no such column; the stream has: {}",
                weir_core::keys::column_names(schema)
            ),
        )
    })?;
    if schema.field(i).data_type() != &weir_core::changes::CHANGE_TYPE {
        return Err(weir_runtime::Error::config(
            setting,
            name,
            "the change column must be STRING (+I, -U, +U, -D)",
        ));
    }
    Ok(i)
}

pub(crate) fn kept_until(ttl_ms: i64, without: &str) -> String {
    if ttl_ms >= weir_core::time::TTL_END_OF_INPUT_MS {
        "to the end of the input (a batch job has no TTL)".into()
    } else {
        format!("until {ttl_ms} ms of event time pass without {without} (TTL)")
    }
}

pub fn register(r: &mut Registry) {
    r.add_operator("count", |s| {
        Ok(Arc::new(spec_from_json::<Count>("count", s)?))
    });
    r.add_operator("changelog_join", |s| {
        Ok(Arc::new(spec_from_json::<ChangelogJoin>(
            "changelog_join",
            s,
        )?))
    });
    r.add_operator("changelog_normalize", |s| {
        Ok(Arc::new(spec_from_json::<ChangelogNormalize>(
            "changelog_normalize",
            s,
        )?))
    });
    r.add_operator("deduplicate", |s| {
        Ok(Arc::new(spec_from_json::<Deduplicate>("deduplicate", s)?))
    });
    r.add_operator("group_aggregate", |s| {
        Ok(Arc::new(spec_from_json::<GroupAggregate>(
            "group_aggregate",
            s,
        )?))
    });
    r.add_operator("interval_join", |s| {
        Ok(Arc::new(spec_from_json::<IntervalJoin>(
            "interval_join",
            s,
        )?))
    });
    r.add_operator("lag", |s| Ok(Arc::new(spec_from_json::<Lag>("lag", s)?)));
    r.add_operator("over_aggregate", |s| {
        Ok(Arc::new(spec_from_json::<OverAggregate>(
            "over_aggregate",
            s,
        )?))
    });
    r.add_operator("regular_join", |s| {
        Ok(Arc::new(spec_from_json::<RegularJoin>("regular_join", s)?))
    });
    r.add_operator("stream_table_join", |s| {
        Ok(Arc::new(spec_from_json::<StreamTableJoin>(
            "stream_table_join",
            s,
        )?))
    });
    r.add_operator("temporal_join", |s| {
        Ok(Arc::new(spec_from_json::<TemporalJoin>(
            "temporal_join",
            s,
        )?))
    });
    r.add_operator("top_n", |s| {
        Ok(Arc::new(spec_from_json::<TopN>("top_n", s)?))
    });
    r.add_operator("window_aggregate", |s| {
        Ok(Arc::new(spec_from_json::<WindowAggregate>(
            "window_aggregate",
            s,
        )?))
    });
    r.add_operator("window_join", |s| {
        Ok(Arc::new(spec_from_json::<WindowJoin>("window_join", s)?))
    });
    r.add_operator("window_rank", |s| {
        Ok(Arc::new(spec_from_json::<WindowRank>("window_rank", s)?))
    });
    r.add_operator("local_time", |s| {
        Ok(Arc::new(spec_from_json::<LocalTime>("local_time", s)?))
    });
    r.add_operator("unnest", |s| {
        Ok(Arc::new(spec_from_json::<Unnest>("unnest", s)?))
    });
    r.add_operator("windowed", |s| {
        Ok(Arc::new(spec_from_json::<Windowed>("windowed", s)?))
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_operator_kind_is_registered() {
        let mut r = weir_runtime::Registry::with_builtins();
        super::register(&mut r);
        let known = format!("{r:?}");
        for kind in [
            "changelog_join",
            "count",
            "deduplicate",
            "interval_join",
            "lag",
            "local_time",
            "over_aggregate",
            "regular_join",
            "stream_table_join",
            "temporal_join",
            "top_n",
            "window_join",
            "window_rank",
            "windowed",
        ] {
            assert!(
                known.contains(&format!("\"{kind}\"")),
                "{kind} missing from {known}"
            );
        }
    }
}
