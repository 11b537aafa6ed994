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

pub mod count;
pub mod interval_join;
pub mod join;
pub mod regular_join;
pub mod stream_table_join;
pub mod temporal_join;
pub mod window_join;

pub use count::{Count, CountOp};
pub use interval_join::{IntervalJoin, IntervalJoinExt, IntervalJoinOp};
pub use join::JoinType;
pub use regular_join::{RegularJoin, RegularJoinExt};
pub use stream_table_join::{StreamTableJoin, StreamTableJoinExt, StreamTableJoinOp};
pub use temporal_join::{TemporalJoin, TemporalJoinExt, TemporalJoinOp};
pub use window_join::{WindowJoin, WindowJoinExt, WindowJoinOp};

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

/// Registers this crate's operators, so job graphs using them can be read from JSON.
pub fn register(r: &mut Registry) {
    r.add_operator("count", |s| {
        Ok(Arc::new(spec_from_json::<Count>("count", s)?))
    });
    r.add_operator("interval_join", |s| {
        Ok(Arc::new(spec_from_json::<IntervalJoin>(
            "interval_join",
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
    r.add_operator("window_join", |s| {
        Ok(Arc::new(spec_from_json::<WindowJoin>("window_join", s)?))
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
            "count",
            "interval_join",
            "regular_join",
            "stream_table_join",
            "temporal_join",
            "window_join",
        ] {
            assert!(
                known.contains(&format!("\"{kind}\"")),
                "{kind} missing from {known}"
            );
        }
    }
}
