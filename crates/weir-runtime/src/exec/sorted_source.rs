//! A source subtask in batch execution ([`BatchRead`]): reads every split to its end, holding
//! the rows in the order read and sorting the stragglers apart ([`ReadOrder`]), then sends them
//! with a watermark that leaves no row late, in step with the job's other sources.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use weir_core::time::{Stopwatch, Watermark};

use super::source_task::SourceTask;
use crate::error::{Error, Result};
use crate::graph::BatchRead;
use crate::message::{Message, StreamBatch};
use crate::operator::Port;
use crate::sort::ReadOrder;
use crate::source::SourcePoll;

impl SourceTask {
    /// Reads the subtask's splits in batch execution (see [`BatchRead`]).
    pub(super) async fn read_sorted(&mut self, batch: BatchRead) -> Result<()> {
        let m = self.outputs.metrics.clone();
        let schema = self.factory.schema();
        let et = self.event_time_index()?;
        let range = self.watermarks.range;
        // The event-time column and the rows in the order to send them, for a source that has
        // one.
        let mut sort = et.map(|et| {
            let sort = ReadOrder::new(
                schema.clone(),
                et,
                batch.disorder_ms,
                self.batch_rows,
                batch.sort_memory_bytes as usize,
                batch.spill_dir.clone(),
            );
            (et, sort)
        });
        let mut reader = if self.assigned.is_empty() || range.is_empty() {
            None
        } else {
            Some(self.create_reader()?)
        };
        // Without an event time the rows go on as they come: nothing downstream orders them.
        while let Some(r) = reader.as_mut() {
            let mut sw = Stopwatch::start(self.clock.as_ref());
            match r.poll()? {
                SourcePoll::Batch { split, batch } => {
                    let rows = batch.num_rows() as u64;
                    m.rows_in.fetch_add(rows, Relaxed);
                    let sm = &self.split_metrics[split];
                    sm.rows_read.fetch_add(rows, Relaxed);
                    match sort.as_mut() {
                        Some((et, sort)) => {
                            let et = *et;
                            let batch = self.without_null_event_times(batch, et, split)?;
                            let batch = super::source_task::keep_rows(batch, et, sm, |t| {
                                range.contains(t)
                            })?;
                            let times = weir_core::batch::event_times(&batch, et)?;
                            if let Some(&last) = times.last() {
                                sm.last_event_time.store(last, Relaxed);
                            }
                            if let Some(&max) = times.iter().max() {
                                sm.max_event_time.fetch_max(max, Relaxed);
                            }
                            sort.push(batch)?;
                            // What the sort holds is the subtask's state; what it spilled, a
                            // gauge.
                            let (rows, bytes) = sort.buffered();
                            m.set_state(rows, bytes);
                            *m.gauges.lock().expect("metrics lock") =
                                vec![("sort_spilled_bytes", sort.spilled_bytes() as i64)];
                            m.busy_ns
                                .fetch_add(sw.lap_nanos(self.clock.as_ref()), Relaxed);
                            // A reader of files is never pending: other tasks get the thread
                            // between its batches.
                            tokio::task::yield_now().await;
                        }
                        None => {
                            m.busy_ns
                                .fetch_add(sw.lap_nanos(self.clock.as_ref()), Relaxed);
                            self.outputs
                                .emit(Port::Main, StreamBatch::new(batch))
                                .await?;
                        }
                    }
                }
                // A split's rows are sent once all are sorted: it finishes then (the progress of
                // a backfill follows the watermark the sending gives the splits).
                SourcePoll::SplitFinished(_) => {}
                SourcePoll::Pending { wait_ms } => {
                    m.busy_ns
                        .fetch_add(sw.lap_nanos(self.clock.as_ref()), Relaxed);
                    tokio::time::sleep(Duration::from_millis(wait_ms.max(1))).await;
                    m.idle_ns
                        .fetch_add(sw.lap_nanos(self.clock.as_ref()), Relaxed);
                }
                SourcePoll::Stamped { .. } | SourcePoll::SplitWatermark { .. } => {
                    return Err(Error::plan(format!(
                        "source `{}` is a repartition topic between the tasks of a group, \
                         which batch execution does not read",
                        self.name
                    )));
                }
                SourcePoll::NewSplit(sm) => {
                    return Err(Error::plan(format!(
                        "source `{}` found a new split `{}` while reading in batch execution, \
                         which reads only bounded sources; make the source bounded",
                        self.name, sm.split
                    )));
                }
                SourcePoll::Finished => break,
            }
        }
        drop(reader);
        if let Some((_, sort)) = sort {
            if sort.spilled_bytes() > 0 {
                tracing::info!(
                    source = %self.name,
                    subtask = self.subtask,
                    spilled_bytes = sort.spilled_bytes(),
                    "sorted by event time, spilling past the sort memory"
                );
            }
            m.set_state(0, 0);
            self.send_in_order(sort).await?;
        }
        for sm in &self.split_metrics {
            sm.finished.store(true, Relaxed);
        }
        m.watermark.store(i64::MAX, Relaxed);
        self.outputs
            .broadcast(Message::Watermark(Watermark::MAX))
            .await?;
        self.outputs.broadcast(Message::End).await?;
        self.report_to_group(None);
        m.finished.store(true, Relaxed);
        Ok(())
    }

    /// Sends the rows, each batch once the subtask's watermark is the group's minimum, with the
    /// watermark after it: the oldest time not yet sent − 1 ms.
    async fn send_in_order(&mut self, sort: ReadOrder) -> Result<()> {
        let m = self.outputs.metrics.clone();
        // Merging spilled runs reads and writes files for a while: off the tasks' threads.
        let mut rows = match tokio::task::spawn_blocking(move || sort.finish()).await {
            Ok(rows) => rows?,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => return Err(Error::Cancelled),
        };
        let mut watermark = i64::MIN;
        loop {
            let mut sw = Stopwatch::start(self.clock.as_ref());
            if let Some(group) = self.group.clone() {
                group.wait_for_minimum(watermark).await;
                m.idle_ns
                    .fetch_add(sw.lap_nanos(self.clock.as_ref()), Relaxed);
            }
            let Some((batch, after)) = rows.next_batch()? else {
                break;
            };
            // Every row is after the watermark before it: none is late.
            let row_wms = vec![watermark; batch.num_rows()];
            m.busy_ns
                .fetch_add(sw.lap_nanos(self.clock.as_ref()), Relaxed);
            self.outputs
                .emit(
                    Port::Main,
                    StreamBatch::with_row_watermarks(batch, row_wms.into()),
                )
                .await?;
            if let Some(after) = after.filter(|&w| w > watermark) {
                watermark = after;
                m.watermark.store(watermark, Relaxed);
                for sm in &self.split_metrics {
                    sm.watermark.store(watermark, Relaxed);
                }
                self.outputs
                    .broadcast(Message::Watermark(Watermark(watermark)))
                    .await?;
                self.report_to_group(Some(watermark));
            }
        }
        Ok(())
    }

    /// Reports the subtask's watermark for each of its splits (`None`: it has finished).
    fn report_to_group(&self, watermark: Option<i64>) {
        if let Some(g) = &self.group {
            for &split in &self.assigned {
                g.report(self.node, split, watermark);
            }
        }
    }
}
