//! What travels on a channel: data batches and in-band control messages.

use arrow_array::{BooleanArray, RecordBatch, UInt32Array};
use arrow_buffer::ScalarBuffer;
use weir_core::time::{Epoch, Watermark};

use crate::error::Result;

/// A batch of rows in flight, with the lateness information its source attached.
#[derive(Debug, Clone)]
pub struct StreamBatch {
    pub data: RecordBatch,
    /// For each row, the watermark of the row's source split just before the row arrived.
    /// A row is late for an operator that buffers by time iff its event time is at or below
    /// this (or, for windows, the window's end − 1 is). `None`: no row of this batch is late
    /// (e.g. rows an operator produced itself).
    pub row_watermarks: Option<ScalarBuffer<i64>>,
}

impl StreamBatch {
    /// A batch whose rows are never late.
    pub fn new(data: RecordBatch) -> Self {
        StreamBatch {
            data,
            row_watermarks: None,
        }
    }

    pub fn with_row_watermarks(data: RecordBatch, row_watermarks: ScalarBuffer<i64>) -> Self {
        debug_assert_eq!(data.num_rows(), row_watermarks.len());
        StreamBatch {
            data,
            row_watermarks: Some(row_watermarks),
        }
    }

    pub fn num_rows(&self) -> usize {
        self.data.num_rows()
    }

    /// The rows where `mask` is true, keeping each row's watermark.
    pub fn filter(&self, mask: &BooleanArray) -> Result<StreamBatch> {
        let data = arrow_select::filter::filter_record_batch(&self.data, mask)?;
        let row_watermarks = self.row_watermarks.as_ref().map(|w| {
            w.iter()
                .zip(mask.values().iter())
                .filter_map(|(w, keep)| keep.then_some(*w))
                .collect()
        });
        Ok(StreamBatch {
            data,
            row_watermarks,
        })
    }

    /// The rows at `indices`, in that order.
    pub fn take(&self, indices: &UInt32Array) -> Result<StreamBatch> {
        let data = arrow_select::take::take_record_batch(&self.data, indices)?;
        let row_watermarks = self
            .row_watermarks
            .as_ref()
            .map(|w| indices.values().iter().map(|&i| w[i as usize]).collect());
        Ok(StreamBatch {
            data,
            row_watermarks,
        })
    }

    /// Rows `offset..offset + len`.
    pub fn slice(&self, offset: usize, len: usize) -> StreamBatch {
        StreamBatch {
            data: self.data.slice(offset, len),
            row_watermarks: self.row_watermarks.as_ref().map(|w| w.slice(offset, len)),
        }
    }

    /// The same rows with different columns (a projection or map keeps lateness).
    pub fn with_data(&self, data: RecordBatch) -> StreamBatch {
        debug_assert_eq!(data.num_rows(), self.num_rows());
        StreamBatch {
            data,
            row_watermarks: self.row_watermarks.clone(),
        }
    }

    /// Splits into (on-time, late) rows given the event times of the rows: a row is late iff
    /// `is_late(event_time, row_watermark)`. Batches without row watermarks are all on time.
    pub fn split_late(
        &self,
        event_times: &[i64],
        is_late: impl Fn(i64, i64) -> bool,
    ) -> Result<(StreamBatch, Option<StreamBatch>)> {
        let Some(wms) = &self.row_watermarks else {
            return Ok((self.clone(), None));
        };
        // Most batches have no late row: found without building a mask.
        if !(event_times.iter().zip(wms.iter())).any(|(&t, &w)| is_late(t, w)) {
            return Ok((self.clone(), None));
        }
        let late = BooleanArray::new(
            arrow_buffer::BooleanBuffer::collect_bool(event_times.len(), |i| {
                is_late(event_times[i], wms[i])
            }),
            None,
        );
        let on_time = arrow_arith_not(&late);
        Ok((self.filter(&on_time)?, Some(self.filter(&late)?)))
    }
}

fn arrow_arith_not(mask: &BooleanArray) -> BooleanArray {
    BooleanArray::new(!mask.values(), None)
}

/// A message on a channel. Control messages travel in band, in order with the data.
#[derive(Debug, Clone)]
pub enum Message {
    Data(StreamBatch),
    /// No more rows at or below this event time will come from this sender.
    Watermark(Watermark),
    /// The sender has no active input; leave it out of the watermark until `Active`.
    Idle,
    Active,
    /// A checkpoint barrier: everything before it belongs to `Epoch`.
    Barrier(Epoch),
    /// The sender finished; nothing follows.
    End,
}

impl Message {
    /// Rows carried (0 for control messages).
    pub fn rows(&self) -> usize {
        match self {
            Message::Data(b) => b.num_rows(),
            _ => 0,
        }
    }
}
