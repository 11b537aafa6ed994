//! `.drop_late()`: removes late rows from a stream, counts them and sends them to the late-row
//! side output (`.late_rows()` of the resulting stream).
//!
//! A row is late iff its event time is at or below its source split's watermark just before
//! it, so the same rows are dropped at any parallelism, batch size and timing.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::{OperatorFactory, StreamInfo};
use crate::message::StreamBatch;
use crate::operator::{Context, Operator, SubtaskInfo};

/// The spec of a late-row filter.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DropLate {}

impl OperatorFactory for DropLate {
    fn kind(&self) -> &'static str {
        "drop_late"
    }
    fn state(&self) -> crate::graph::OperatorState {
        crate::graph::OperatorState::Stateless
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = super::single_input("drop_late", inputs)?;
        if input.event_time.is_none() {
            return Err(Error::plan(
                "drop_late needs a stream with event time; declare the source's event-time column",
            ));
        }
        Ok(input.clone())
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = self.plan(inputs)?;
        let et = input.event_time.expect("checked in plan");
        Ok(Box::new(DropLateOp {
            event_time: weir_core::batch::event_time_index(&input.schema, &et)?,
        }))
    }
}

/// A late-row filter subtask.
pub struct DropLateOp {
    event_time: usize,
}

impl Operator for DropLateOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let times = weir_core::batch::event_times(&batch.data, self.event_time)?;
        let (on_time, late) = batch.split_late(&times, |t, wm| t <= wm)?;
        ctx.emit(on_time);
        if let Some(late) = late {
            ctx.emit_late(late);
        }
        Ok(())
    }
}
