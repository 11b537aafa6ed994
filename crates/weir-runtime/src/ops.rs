//! The runtime's own stateless operators, one per file. Stateful operators (aggregations,
//! joins, windows) live in weir-operators.

pub mod drop_late;
pub mod filter;
pub mod map;
pub mod project;
pub mod union;

pub use drop_late::DropLate;
pub use filter::Filter;
pub use map::MapBatches;
pub use project::Project;
pub use union::Union;

use crate::graph::{spec_from_json, Registry};
use std::sync::Arc;

pub(crate) fn register(r: &mut Registry) {
    r.add_operator("filter", |s| {
        Ok(Arc::new(spec_from_json::<Filter>("filter", s)?))
    });
    r.add_operator("project", |s| {
        Ok(Arc::new(spec_from_json::<Project>("project", s)?))
    });
    r.add_operator("union", |s| {
        Ok(Arc::new(spec_from_json::<Union>("union", s)?))
    });
    r.add_sink("blackhole", |_| Ok(Arc::new(crate::sink::BlackholeSink)));
    r.add_operator("drop_late", |s| {
        Ok(Arc::new(spec_from_json::<DropLate>("drop_late", s)?))
    });
}

/// The single input of a single-input operator, or a `Plan` error naming the operator.
pub fn single_input<'a>(
    kind: &str,
    inputs: &'a [crate::graph::StreamInfo],
) -> crate::Result<&'a crate::graph::StreamInfo> {
    match inputs {
        [one] => Ok(one),
        _ => Err(crate::Error::plan(format!(
            "`{kind}` takes one input, got {}",
            inputs.len()
        ))),
    }
}
