//! When state expires, by event time.

/// When buffered rows expire: (expiry time, slot, tag) kept in 256 ms buckets, so a batch's
/// rows cost about one map lookup per bucket and the watermark takes whole buckets.
#[derive(Debug, Default)]
pub struct ExpiryQueue {
    buckets: std::collections::BTreeMap<i64, Vec<(i64, u32, u8)>>,
    staged: Vec<(i64, u32, u8)>,
    /// Scratch of `flush`, kept for its capacity: per bucket of the staged entries, the next
    /// place to fill and the end of its places.
    next: Vec<u32>,
    ends: Vec<u32>,
    /// Emptied buckets, kept for their capacity: a bucket's vector filled from empty took 2 %
    /// of the fixture's interval join's CPU in growing (`perf`).
    spare: Vec<Vec<(i64, u32, u8)>>,
}

/// The most emptied buckets kept for reuse: about one bucket is emptied as one is made.
const SPARE_BUCKETS: usize = 4;
/// The most entries an emptied bucket kept for reuse has room for (1 MiB).
const SPARE_ENTRIES: usize = 65_536;

const BUCKET_SHIFT: u32 = 8;

/// The most buckets a flush's entries may span to be put in bucket order by counting (a pass
/// to count, one to swap each into place) rather than by sorting.
const COUNTED_SPAN: i64 = 4096;

impl ExpiryQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry (grouped into buckets at the next `flush` or `pop_due`).
    pub fn push(&mut self, expiry: i64, slot: usize, tag: u8) {
        self.staged.push((expiry, slot as u32, tag));
    }

    /// Queues `slot` at `at` if that is earlier than `timer`, the earliest time queued for it
    /// since its last entry fired (kept by the caller, one per slot), and records it there. An
    /// entry that pops while its slot's `timer` is still later than the watermark was queued
    /// before an earlier one took over: it is stale, and the caller does nothing for it.
    pub fn push_earlier(&mut self, timer: &mut Option<i64>, at: i64, slot: usize) {
        if timer.is_none_or(|q| at < q) {
            *timer = Some(at);
            self.push(at, slot, 0);
        }
    }

    /// Files staged entries into their buckets, in no particular order within a bucket: that
    /// order means nothing to `pop_due`.
    pub fn flush(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        self.bucket_order();
        let mut rest = &self.staged[..];
        while let Some(first) = rest.first() {
            let b = first.0 >> BUCKET_SHIFT;
            let n = rest.partition_point(|e| e.0 >> BUCKET_SHIFT == b);
            let spare = &mut self.spare;
            self.buckets
                .entry(b)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        self.staged.clear();
    }

    /// Puts the staged entries in bucket order. Entries come in about their time's order, a
    /// bound's width apart, so they span a few buckets: counting them per bucket, then swapping
    /// each into its bucket's places, takes two passes and no second buffer. The sort this
    /// replaces took 4 % of the fixture's interval join's CPU (`perf`); many buckets apart (a
    /// long TTL's entries), they are still sorted.
    fn bucket_order(&mut self) {
        let bucket = |e: &(i64, u32, u8)| e.0 >> BUCKET_SHIFT;
        let (lo, hi) = self
            .staged
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), e| {
                (lo.min(bucket(e)), hi.max(bucket(e)))
            });
        if hi.saturating_sub(lo) >= COUNTED_SPAN {
            self.staged.sort_unstable_by_key(|e| e.0);
            return;
        }
        let span = (hi - lo + 1) as usize;
        let (next, ends) = (&mut self.next, &mut self.ends);
        next.clear();
        next.resize(span, 0);
        for e in &self.staged {
            next[(bucket(e) - lo) as usize] += 1;
        }
        ends.clear();
        let mut at = 0;
        for c in next.iter_mut() {
            (*c, at) = (at, at + *c);
            ends.push(at);
        }
        // Each swap puts one entry in its bucket's next place, for good.
        for b in 0..span {
            while next[b] < ends[b] {
                let i = next[b] as usize;
                let t = (bucket(&self.staged[i]) - lo) as usize;
                if t != b {
                    self.staged.swap(i, next[t] as usize);
                }
                next[t] += 1;
            }
        }
    }

    /// Removes the entries at or below `watermark` into `out` as (slot, tag).
    pub fn pop_due(&mut self, watermark: i64, out: &mut Vec<(usize, u8)>) {
        self.flush();
        let wb = watermark >> BUCKET_SHIFT;
        while let Some(entry) = self.buckets.first_entry() {
            let b = *entry.key();
            if b > wb {
                break;
            }
            if b < wb {
                let mut v = entry.remove();
                out.extend(v.drain(..).map(|(_, s, t)| (s as usize, t)));
                self.keep_spare(v);
            } else {
                let v = entry.into_mut();
                v.retain(|&(e, s, t)| {
                    if e <= watermark {
                        out.push((s as usize, t));
                        false
                    } else {
                        true
                    }
                });
                if v.is_empty() {
                    if let Some(v) = self.buckets.remove(&b) {
                        self.keep_spare(v);
                    }
                }
                break;
            }
        }
    }

    /// Keeps the emptied bucket `v` for reuse, up to [`SPARE_BUCKETS`] of them, each of at
    /// most [`SPARE_ENTRIES`] entries' room.
    fn keep_spare(&mut self, v: Vec<(i64, u32, u8)>) {
        if self.spare.len() < SPARE_BUCKETS && v.capacity() <= SPARE_ENTRIES {
            self.spare.push(v);
        }
    }
}
/// An [`ExpiryQueue`] of slots whose keys may end before their expiry (a delete): a slot freed
/// and taken by another key (or by the same key again) keeps its entry, which looks at the
/// slot's new key when it comes due; a slot queued for an earlier time than its entry's gets
/// another entry then, so that no key expires later than asked. A slot has one entry but for
/// those: the queue never holds many more entries than slots.
#[derive(Debug, Default)]
pub struct SlotExpiry {
    queue: ExpiryQueue,
    /// Per slot, the earliest time queued for it since its last entry fired.
    queued: Vec<Option<i64>>,
}

impl SlotExpiry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `slot` to expire at `at`, unless it has an entry at or before then already.
    pub fn queue(&mut self, slot: usize, at: i64) {
        if self.queued.len() <= slot {
            self.queued.resize(slot + 1, None);
        }
        self.queue.push_earlier(&mut self.queued[slot], at, slot);
    }

    /// The slots whose entries are at or below `watermark`, taken out, each once: the caller
    /// forgets each slot's key if it is due, or queues it again. An entry that comes due while
    /// its slot is queued for later (it was queued again since that entry fired) is left out.
    pub fn pop_due(&mut self, watermark: i64) -> Vec<usize> {
        let mut due = Vec::new();
        self.queue.pop_due(watermark, &mut due);
        let mut slots: Vec<usize> = due.into_iter().map(|(s, _)| s).collect();
        slots.sort_unstable();
        slots.dedup();
        slots.retain(|&s| match self.queued[s] {
            Some(at) if at > watermark => false,
            _ => {
                self.queued[s] = None;
                true
            }
        });
        slots
    }

    /// The slots due at `watermark` whose keys expire by then, taken out: `expires_at` gives a
    /// slot's expiry now (None for a slot emptied since it was queued, which is dropped); a
    /// slot that expires later (its key had rows since) is queued again for then.
    pub fn expired(
        &mut self,
        watermark: i64,
        expires_at: impl Fn(usize) -> Option<i64>,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        for slot in self.pop_due(watermark) {
            match expires_at(slot) {
                None => {}
                Some(at) if at > watermark => self.queue(slot, at),
                Some(_) => out.push(slot),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Each watermark takes out exactly the entries at or below it, whether a flush's
        /// entries span few buckets (counted into order) or many (sorted).
        #[test]
        fn pop_due_takes_the_entries_at_or_below_the_watermark(
            batches in prop::collection::vec(
                prop::collection::vec((0i64..3_000, 0u8..2), 0..40), 1..6),
            far in prop::collection::vec(0i64..4_000_000, 0..4),
            steps in prop::collection::vec(0i64..1_500, 1..8),
        ) {
            let mut q = ExpiryQueue::new();
            let mut left: Vec<(i64, u32, u8)> = Vec::new();
            let mut wm = -1_000_000;
            let mut batches = batches.into_iter();
            // Each entry's own slot number, so that the one that comes out is the one due.
            let mut pushed = 0u32;
            let steps = steps.into_iter().chain([i64::MAX / 2]);
            for (i, step) in steps.enumerate() {
                if let Some(mut batch) = batches.next() {
                    batch.extend(far.iter().filter(|_| i == 0).map(|&t| (t, 1)));
                    for &(t, tag) in &batch {
                        // Ahead of the watermark, as a queue's users push them.
                        let t = wm + 1 + t;
                        q.push(t, pushed as usize, tag);
                        left.push((t, pushed, tag));
                        pushed += 1;
                    }
                }
                // The last step takes out everything left: none lost, none twice.
                wm = wm.saturating_add(step);
                let mut out = Vec::new();
                q.pop_due(wm, &mut out);
                let mut want: Vec<(usize, u8)> = left
                    .iter()
                    .filter(|e| e.0 <= wm)
                    .map(|e| (e.1 as usize, e.2))
                    .collect();
                left.retain(|e| e.0 > wm);
                out.sort_unstable();
                want.sort_unstable();
                prop_assert_eq!(out, want);
            }
            prop_assert!(left.is_empty());
        }
    }

    #[test]
    fn a_slot_comes_due_at_the_earliest_time_queued_once() {
        let mut e = SlotExpiry::new();
        e.queue(3, 1_000);
        e.queue(3, 1_500);
        e.queue(1, 2_000);
        assert_eq!(e.pop_due(999), Vec::<usize>::new());
        assert_eq!(e.pop_due(1_000), vec![3]);
        // Due and taken out: the slot may be queued again.
        e.queue(3, 5_000);
        assert_eq!(e.pop_due(10_000), vec![1, 3]);
        // An earlier time takes over (a key deleted and added again with an earlier row): the
        // slot comes due then, once. Its later entry, coming due while the slot is queued for
        // later still, is left out.
        e.queue(4, 1_000_000);
        e.queue(4, 20_000);
        assert_eq!(e.pop_due(20_000), vec![4]);
        e.queue(4, 2_000_000);
        assert_eq!(e.pop_due(1_000_000), Vec::<usize>::new());
        assert_eq!(e.pop_due(2_000_000), vec![4]);
        // Two entries of a slot due at once give it once.
        e.queue(5, 3_000_000);
        e.queue(5, 2_500_000);
        assert_eq!(e.pop_due(i64::MAX), vec![5]);
    }
}
