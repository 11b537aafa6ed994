//! Rows of a bounded source in the order they were read, but for the rows too far behind:
//! what batch execution sends when the input is nearly in event-time order, as files of
//! events usually are (see [`crate::graph::BatchRead`]).
//!
//! A row more than `disorder_ms` behind the newest row read before it is a straggler: the
//! stragglers go through an [`EventTimeSort`]; the other rows are held as they came. The rows
//! are then sent held batch by held batch, each straggler just before the first held batch
//! whose rows, and the ones after, are all at or after it; with each batch comes the
//! watermark one millisecond before the oldest row not yet sent. So no row is late, as with a
//! full sort, and the rows in flight behind the watermark are about `disorder_ms`' worth (the
//! held rows after any held batch are at most `disorder_ms` behind the newest before them).
//! Nothing is sorted or copied but the stragglers. When what is held passes the memory budget,
//! every row goes through the sort, which spills.

use std::collections::VecDeque;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_buffer::ScalarBuffer;
use arrow_schema::SchemaRef;

use super::{sort_bytes, EventTimeSort, SortedRows};
use crate::error::Result;

/// Rows taken in read order, the stragglers sorted apart (see the module doc).
pub struct ReadOrder {
    et: usize,
    disorder_ms: i64,
    budget_bytes: usize,
    /// The batches held in the order read, with the oldest time of each.
    held: Vec<(RecordBatch, i64)>,
    /// The newest time read so far.
    newest: i64,
    /// The stragglers as read, until the rows are sent or pass the budget.
    stragglers: Vec<RecordBatch>,
    /// Rows and bytes held and set aside as stragglers (counted as the sort counts them).
    rows: usize,
    bytes: usize,
    /// Past the budget every row goes through it; else the stragglers at the end.
    sort: EventTimeSort,
    /// Past the budget: every row goes through the sort.
    sorting_all: bool,
}

impl ReadOrder {
    /// Rows of `schema` with their event time in column `et`, rows more than `disorder_ms`
    /// behind the newest before them sorted apart; at most about `budget_bytes` in memory
    /// (the sort spills into a new folder in `spill_root`, the system's temporary folder when
    /// `None`); batches of at most `batch_rows` rows out of the sort.
    pub fn new(
        schema: SchemaRef,
        et: usize,
        disorder_ms: i64,
        batch_rows: usize,
        budget_bytes: usize,
        spill_root: Option<std::path::PathBuf>,
    ) -> Self {
        ReadOrder {
            et,
            disorder_ms: disorder_ms.max(0),
            budget_bytes,
            held: Vec::new(),
            newest: i64::MIN,
            stragglers: Vec::new(),
            rows: 0,
            bytes: 0,
            sort: EventTimeSort::new(schema, et, batch_rows, budget_bytes, spill_root),
            sorting_all: false,
        }
    }

    /// Takes `batch` in, the next rows read.
    ///
    /// # Errors
    /// An I/O error writing a spill file; an event-time column that is not a time.
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.sorting_all {
            return self.sort.push(batch);
        }
        let times = weir_core::batch::event_times(&batch, self.et)?;
        let mut newest = self.newest;
        let mut in_order = Vec::new();
        let mut oldest = i64::MAX;
        for (r, &t) in times.iter().enumerate() {
            let straggler = t < newest.saturating_sub(self.disorder_ms);
            if straggler && in_order.is_empty() {
                in_order = vec![true; times.len()];
            }
            if straggler {
                in_order[r] = false;
            } else {
                oldest = oldest.min(t);
                newest = newest.max(t);
            }
        }
        self.newest = newest;
        let held = if in_order.is_empty() {
            batch
        } else {
            let late: BooleanArray = in_order.iter().map(|k| Some(!k)).collect();
            let stragglers = arrow_select::filter::filter_record_batch(&batch, &late)?;
            self.bytes += sort_bytes(&stragglers);
            self.rows += stragglers.num_rows();
            self.stragglers.push(stragglers);
            arrow_select::filter::filter_record_batch(&batch, &BooleanArray::from(in_order))?
        };
        if held.num_rows() > 0 {
            self.bytes += sort_bytes(&held);
            self.rows += held.num_rows();
            self.held.push((held, oldest));
        }
        if self.bytes > self.budget_bytes {
            // Too much to hold: the sort takes it all, spilling sorted runs.
            self.sorting_all = true;
            self.hand_all_to_sort()?;
        }
        Ok(())
    }

    /// Hands every row taken so far to the sort: the held rows first, then the stragglers,
    /// so rows of one time keep the order they were read in (a held row with a straggler's
    /// time was read before it, as the straggler is behind what was read before it).
    fn hand_all_to_sort(&mut self) -> Result<()> {
        self.bytes = 0;
        self.rows = 0;
        for (b, _) in std::mem::take(&mut self.held) {
            self.sort.push(b)?;
        }
        for b in std::mem::take(&mut self.stragglers) {
            self.sort.push(b)?;
        }
        Ok(())
    }

    /// Rows and bytes held in memory now.
    pub fn buffered(&self) -> (u64, u64) {
        let (rows, bytes) = self.sort.buffered();
        (rows + self.rows as u64, bytes + self.bytes as u64)
    }

    /// Bytes written to spill files so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.sort.spilled_bytes()
    }

    /// Every row taken in, in the order to send them.
    ///
    /// # Errors
    /// An I/O error reading a spill file back.
    pub fn finish(mut self) -> Result<ReadOrderRows> {
        for b in std::mem::take(&mut self.stragglers) {
            self.sort.push(b)?;
        }
        // The oldest time of each held batch and of all after it.
        let mut oldest_from = vec![i64::MAX; self.held.len()];
        let mut oldest = i64::MAX;
        for (i, (_, t)) in self.held.iter().enumerate().rev() {
            oldest = oldest.min(*t);
            oldest_from[i] = oldest;
        }
        Ok(ReadOrderRows {
            held: self.held.into_iter().map(|(b, _)| b).collect(),
            oldest_from,
            stragglers: self.sort.finish()?,
            next_straggler: None,
            et: self.et,
        })
    }
}

/// The rows of a [`ReadOrder`], a batch at a time ([`ReadOrderRows::next_batch`]).
pub struct ReadOrderRows {
    held: VecDeque<RecordBatch>,
    /// The oldest time of held batch `i` (of all of them, sent or not) and of all after it.
    oldest_from: Vec<i64>,
    stragglers: SortedRows,
    /// The sorted stragglers' next rows, and their times.
    next_straggler: Option<(RecordBatch, ScalarBuffer<i64>)>,
    et: usize,
}

impl ReadOrderRows {
    /// The next batch to send, and the watermark after it: one millisecond before the oldest
    /// row not yet sent (`None` when it was the last); `None` after the last.
    ///
    /// # Errors
    /// An I/O error reading a spill file.
    pub fn next_batch(&mut self) -> Result<Option<(RecordBatch, Option<i64>)>> {
        self.fetch_straggler()?;
        // `None` when no held row is left: then every straggler goes.
        let held_oldest = self.held_oldest();
        let batch = match self.next_straggler.take() {
            Some((batch, times)) if held_oldest.is_none_or(|h| times[0] < h) => {
                // The stragglers older than every held row left.
                let cut = times.partition_point(|&t| held_oldest.is_none_or(|h| t < h));
                if cut < times.len() {
                    let rest = batch.slice(cut, times.len() - cut);
                    self.next_straggler = Some((rest, times.slice(cut, times.len() - cut)));
                }
                batch.slice(0, cut)
            }
            straggler => {
                self.next_straggler = straggler;
                match self.held.pop_front() {
                    Some(b) => b,
                    None => return Ok(None),
                }
            }
        };
        self.fetch_straggler()?;
        let straggler_oldest = self.next_straggler.as_ref().map(|(_, t)| t[0]);
        let oldest_left = [self.held_oldest(), straggler_oldest]
            .into_iter()
            .flatten()
            .min();
        Ok(Some((batch, oldest_left.map(|t| t.saturating_sub(1)))))
    }

    /// The oldest time of the held rows not yet sent.
    fn held_oldest(&self) -> Option<i64> {
        let sent = self.oldest_from.len() - self.held.len();
        self.oldest_from.get(sent).copied()
    }

    /// Makes sure the sorted stragglers' next rows are at hand, if any are left.
    fn fetch_straggler(&mut self) -> Result<()> {
        if self.next_straggler.is_none() {
            if let Some(b) = self.stragglers.next_batch()? {
                let times = weir_core::batch::event_times(&b, self.et)?;
                self.next_straggler = Some((b, times));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use proptest::prelude::*;

    use super::*;
    use crate::sort::tests::{batch, schema};

    /// Each batch sent: its rows (id, time) and the watermark after it.
    type Sent = Vec<(Vec<(i64, i64)>, Option<i64>)>;

    /// Rows (id, time) read in batches of `batch_rows`, then sent; and whether every row went
    /// through the sort.
    fn run(
        times: &[i64],
        batch_rows: usize,
        disorder_ms: i64,
        budget_bytes: usize,
    ) -> (Sent, bool) {
        let spill = tempfile::tempdir().unwrap();
        let mut order = ReadOrder::new(
            schema(),
            1,
            disorder_ms,
            7,
            budget_bytes,
            Some(spill.path().to_path_buf()),
        );
        for (k, chunk) in times.chunks(batch_rows.max(1)).enumerate() {
            let rows: Vec<(i64, i64)> = (chunk.iter().enumerate())
                .map(|(i, &t)| ((k * batch_rows + i) as i64, t))
                .collect();
            order.push(batch(&rows)).unwrap();
        }
        let sorted_all = order.sorting_all;
        let mut rows = order.finish().unwrap();
        let mut out = Vec::new();
        while let Some((b, watermark)) = rows.next_batch().unwrap() {
            let id = b.column(0).as_primitive::<Int64Type>().values().to_vec();
            let ts = b.column(1).as_primitive::<Int64Type>().values().to_vec();
            out.push((id.into_iter().zip(ts).collect(), watermark));
        }
        (out, sorted_all)
    }

    /// Times in arrival order: ascending with jitter (ties among them), now and then a row far
    /// behind, and rarely one at the end of time.
    fn times() -> impl Strategy<Value = Vec<i64>> {
        let step = (
            0i64..50,
            0i64..40,
            prop::bool::weighted(0.05),
            prop::bool::weighted(0.01),
        );
        prop::collection::vec(step, 0..300).prop_map(|steps| {
            let mut now = 1_000i64;
            steps
                .into_iter()
                .map(|(step, jitter, far, end)| {
                    now += step / 4;
                    if end {
                        i64::MAX
                    } else if far {
                        now - 500 - jitter * 10
                    } else {
                        now - jitter / 8
                    }
                })
                .collect()
        })
    }

    proptest! {
        /// Every row leaves once; none is at or behind the watermark sent before it; each
        /// watermark is one millisecond before the oldest row left; after a batch of rows held
        /// in order, the watermark is within the disorder (and a millisecond) of the newest row
        /// read before them; and with no stragglers the rows leave as they came.
        #[test]
        fn no_row_is_late_and_the_watermark_follows_the_rows(
            times in times(),
            batch_rows in 1usize..40,
            disorder_ms in prop_oneof![Just(0i64), Just(1), Just(30), Just(200)],
            small_budget in any::<bool>(),
        ) {
            let budget = if small_budget { 2_000 } else { 1 << 30 };
            let (out, sorted_all) = run(&times, batch_rows, disorder_ms, budget);
            // Which rows are stragglers, and the newest time read before each row.
            let mut newest = i64::MIN;
            let mut newest_before = Vec::new();
            let straggler: Vec<bool> = (times.iter())
                .map(|&t| {
                    newest_before.push(newest);
                    let far = t < newest.saturating_sub(disorder_ms);
                    newest = newest.max(t);
                    far
                })
                .collect();
            let mut left: Vec<(i64, i64)> =
                times.iter().enumerate().map(|(i, &t)| (i as i64, t)).collect();
            let mut watermark = i64::MIN;
            for (rows, after) in &out {
                prop_assert!(!rows.is_empty());
                for &(id, t) in rows {
                    prop_assert!(t > watermark, "row {id} at {t} behind watermark {watermark}");
                    let at = left.iter().position(|r| r.0 == id).expect("sent once");
                    prop_assert_eq!(left.swap_remove(at).1, t);
                }
                let oldest_left = left.iter().map(|r| r.1).min();
                prop_assert_eq!(*after, oldest_left.map(|t| t - 1));
                if let Some(w) = after {
                    watermark = *w;
                    let first = rows.iter().map(|r| r.0 as usize).min().expect("rows");
                    if !sorted_all && rows.iter().all(|r| !straggler[r.0 as usize]) {
                        let read_before = newest_before[first];
                        prop_assert!(
                            *w >= read_before.saturating_sub(disorder_ms + 1),
                            "watermark {w} after rows read after {read_before}"
                        );
                    }
                }
            }
            prop_assert!(left.is_empty());
            // Rows of one time leave in the order they were read.
            let sent: Vec<(i64, i64)> = out.iter().flat_map(|(r, _)| r.iter().copied()).collect();
            for (k, a) in sent.iter().enumerate() {
                for b in &sent[k + 1..] {
                    prop_assert!(a.1 != b.1 || a.0 < b.0, "{:?} sent before {:?}", a, b);
                }
            }
            if !sorted_all && !straggler.contains(&true) {
                let sent: Vec<i64> = out.iter().flat_map(|(r, _)| r.iter().map(|x| x.0)).collect();
                prop_assert_eq!(sent, (0..times.len() as i64).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn rows_in_order_are_sent_as_read_without_a_sort() {
        let times: Vec<i64> = (0..100).map(|i| 1_000 + i * 10 - (i % 3)).collect();
        let (out, sorted_all) = run(&times, 16, 5, 1 << 30);
        assert!(!sorted_all);
        assert_eq!(out.len(), 7, "the batches as read");
        let ids: Vec<i64> = out
            .iter()
            .flat_map(|(r, _)| r.iter().map(|x| x.0))
            .collect();
        assert_eq!(ids, (0..100).collect::<Vec<_>>());
        // A straggler far behind goes first, alone, and holds the watermark until it has gone.
        let mut times = times;
        times[50] = 100;
        let (out, _) = run(&times, 16, 5, 1 << 30);
        assert_eq!(out[0].0, vec![(50, 100)]);
        assert_eq!(out[0].1, Some(999));
    }
}
