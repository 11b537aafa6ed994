//! `.regular_join(right, RegularJoin::with_ttl(ms))`: an equi-join without a time condition,
//! which weir runs only with a state TTL.
//!
//! A regular join keeps every row of both sides, forever, in case a matching row comes: its
//! state grows without bound. weir refuses to build one without a TTL and says what to use
//! instead. With a TTL, each row is kept until the join's watermark passes its event time plus
//! the TTL, and two rows join when their event times are at most the TTL apart: the TTL is in
//! event time, so the result is the same on every run. (Flink's `table.exec.state.ttl` is in
//! processing time: which pairs it finds depends on how fast the job ran.) This is an interval
//! join with bounds `[-ttl, +ttl]`, and runs as one.
//!
//! Its checkpointed state is therefore the interval join's.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::{Error, Operator, Result, SubtaskInfo};

use crate::interval_join::IntervalJoin;
use crate::join::JoinType;

/// The spec of a regular equi-join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegularJoin {
    #[serde(default)]
    pub left_keys: Vec<String>,
    #[serde(default)]
    pub right_keys: Vec<String>,
    /// State TTL in event-time milliseconds; `None` is refused.
    pub ttl_ms: Option<i64>,
    #[serde(default)]
    pub join_type: JoinType,
    #[serde(default = "left_alias")]
    pub left_alias: String,
    #[serde(default = "right_alias")]
    pub right_alias: String,
}

fn left_alias() -> String {
    "left".into()
}
fn right_alias() -> String {
    "right".into()
}

impl RegularJoin {
    /// A join without a TTL: building it fails (see the module docs).
    pub fn unbounded() -> Self {
        RegularJoin {
            left_keys: Vec::new(),
            right_keys: Vec::new(),
            ttl_ms: None,
            join_type: JoinType::Inner,
            left_alias: left_alias(),
            right_alias: right_alias(),
        }
    }

    /// A join whose rows live `ttl_ms` of event time.
    pub fn with_ttl(ttl_ms: i64) -> Self {
        RegularJoin {
            ttl_ms: Some(ttl_ms),
            ..Self::unbounded()
        }
    }

    pub fn join_type(mut self, t: JoinType) -> Self {
        self.join_type = t;
        self
    }

    pub fn aliases(mut self, left: &str, right: &str) -> Self {
        self.left_alias = left.into();
        self.right_alias = right.into();
        self
    }

    fn as_interval_join(&self) -> Result<IntervalJoin> {
        let ttl = match self.ttl_ms {
            None => {
                return Err(Error::plan(format!(
                    "a regular join on ({}) = ({}) keeps every row of both sides forever, so its \
                     state grows without bound; give it a state TTL \
                     (`RegularJoin::with_ttl(ms)`, in SQL `SET 'table.exec.state.ttl'`), or \
                     join within a time bound with an interval join (`IntervalJoin::between`)",
                    self.left_keys.join(", "),
                    self.right_keys.join(", ")
                )))
            }
            Some(t) if t <= 0 => {
                return Err(Error::config("ttl_ms", t, "a state TTL must be positive"));
            }
            Some(t) => t,
        };
        Ok(IntervalJoin {
            left_keys: self.left_keys.clone(),
            right_keys: self.right_keys.clone(),
            lower_ms: -ttl,
            upper_ms: ttl,
            join_type: self.join_type,
            left_alias: self.left_alias.clone(),
            right_alias: self.right_alias.clone(),
        })
    }
}

impl OperatorFactory for RegularJoin {
    fn kind(&self) -> &'static str {
        "regular_join"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("regular join spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        self.as_interval_join()?.plan(inputs)
    }
    fn time_bound_ms(&self) -> Option<i64> {
        self.ttl_ms
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        self.as_interval_join()?.create(inputs, info)
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 1 }
    }
    /// It runs as an interval join, whose rows go on disk.
    fn state_on_disk(&self) -> bool {
        true
    }
    fn describe(&self) -> String {
        match self.ttl_ms {
            Some(ttl) if ttl >= weir_core::time::TTL_END_OF_INPUT_MS => format!(
                "{:?} regular join on ({}) = ({}) without a state TTL (a batch job): keeps every \
                 row to the end of the input, per key",
                self.join_type,
                self.left_keys.join(", "),
                self.right_keys.join(", ")
            ),
            Some(ttl) => format!(
                "{:?} regular join on ({}) = ({}) with an event-time state TTL of {ttl} ms; keeps \
                 each row {ttl} ms past its event time plus the watermark delay, per key",
                self.join_type,
                self.left_keys.join(", "),
                self.right_keys.join(", ")
            ),
            None => "regular join without a state TTL (refused)".into(),
        }
    }
}

/// Builder method for keyed streams.
pub trait RegularJoinExt {
    /// Joins this stream (left) with `right` on their keys; refused without a TTL.
    #[track_caller]
    fn regular_join(
        &self,
        right: &weir_runtime::KeyedStream,
        join: RegularJoin,
    ) -> weir_runtime::Stream;
}

impl RegularJoinExt for weir_runtime::KeyedStream {
    #[track_caller]
    fn regular_join(
        &self,
        right: &weir_runtime::KeyedStream,
        mut join: RegularJoin,
    ) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        join.left_keys = self.keys().to_vec();
        join.right_keys = right.keys().to_vec();
        self.connect_at(right, "regular_join".into(), Arc::new(join), at)
    }
}
