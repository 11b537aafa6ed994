//! Watermarks: generated per source split, combined per operator.
//!
//! A source split runs a [`SplitWatermarks`]: it follows the split's maximum event time and
//! derives the split's watermark from a [`WatermarkStrategy`]; after an idle timeout with no
//! rows it reports the split idle, so that it stops holding the watermark back, and any new row
//! makes it active again.
//!
//! Every subtask combines its inputs with a [`WatermarkTracker`]: the minimum over the inputs
//! that are not idle, never moving backwards.
//!
//! # Lateness
//!
//! weir decides lateness per input split, from the split's own watermark just before the row:
//! a row is late iff its event time is at or below that watermark. Sources attach this
//! per-row watermark to every batch (see `row_watermarks` in the runtime), so an operator that
//! buffers by time decides lateness identically at any parallelism, batch size or
//! interleaving of its inputs.

use crate::time::{EventTime, ProcTime, Watermark};
use serde::{Deserialize, Serialize};

/// How a split's watermark follows its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum WatermarkStrategy {
    /// Rows arrive at most `max_delay_ms` out of order: the watermark is
    /// `max event time seen − max_delay_ms` (Flink SQL's `WATERMARK FOR rt AS rt - INTERVAL ...`).
    BoundedOutOfOrderness { max_delay_ms: i64 },
    /// Event times never decrease; rows with the same time as the maximum are still on time:
    /// the watermark is `max event time seen − 1 ms` (Flink's `forMonotonousTimestamps`).
    Monotonous,
}

impl WatermarkStrategy {
    pub fn bounded(max_delay_ms: i64) -> Self {
        WatermarkStrategy::BoundedOutOfOrderness { max_delay_ms }
    }

    /// The watermark once `max_seen` is the greatest event time seen.
    pub fn watermark_for(self, max_seen: EventTime) -> Watermark {
        if max_seen == EventTime::MIN {
            return Watermark::MIN;
        }
        let delay = match self {
            WatermarkStrategy::BoundedOutOfOrderness { max_delay_ms } => max_delay_ms,
            WatermarkStrategy::Monotonous => 1,
        };
        Watermark(max_seen.0.saturating_sub(delay))
    }

    /// How far the watermark trails the newest row, in ms.
    pub fn delay_millis(self) -> i64 {
        match self {
            WatermarkStrategy::BoundedOutOfOrderness { max_delay_ms } => max_delay_ms,
            WatermarkStrategy::Monotonous => 1,
        }
    }
}

impl Default for WatermarkStrategy {
    fn default() -> Self {
        WatermarkStrategy::bounded(0)
    }
}

/// The watermark state of one source split.
#[derive(Debug, Clone)]
pub struct SplitWatermarks {
    strategy: WatermarkStrategy,
    idle_timeout_ms: Option<i64>,
    max_seen: EventTime,
    last_row_at: Option<ProcTime>,
    idle: bool,
}

/// What [`SplitWatermarks::observe`] learnt from one batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Rows at or below the split's watermark just before them.
    pub late_rows: usize,
    /// The split was idle and this batch made it active again.
    pub became_active: bool,
}

impl SplitWatermarks {
    /// A split's watermarks; `idle_timeout_ms` of `None` or 0 means it never goes idle.
    pub fn new(strategy: WatermarkStrategy, idle_timeout_ms: Option<i64>) -> Self {
        SplitWatermarks {
            strategy,
            idle_timeout_ms: idle_timeout_ms.filter(|&ms| ms > 0),
            max_seen: EventTime::MIN,
            last_row_at: None,
            idle: false,
        }
    }

    pub fn strategy(&self) -> WatermarkStrategy {
        self.strategy
    }

    /// The split's watermark now.
    pub fn watermark(&self) -> Watermark {
        self.strategy.watermark_for(self.max_seen)
    }

    /// The greatest event time seen on the split.
    pub fn max_event_time(&self) -> EventTime {
        self.max_seen
    }

    /// Takes up where a split stood at a checkpoint: its watermark is `watermark` again (and
    /// never goes below it), so rows late then are late after a restore too.
    pub fn restore(&mut self, watermark: Watermark) {
        if watermark != Watermark::MIN {
            let max_seen = watermark.0.saturating_add(self.strategy.delay_millis());
            self.max_seen = self.max_seen.max(EventTime(max_seen));
        }
    }

    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// For a reader that knows its split's watermark instead of deriving it from rows (a
    /// repartition topic's, the least over its writers): the split's watermark is `watermark`
    /// now (never lowered), and the split is active.
    pub fn advance_to(&mut self, watermark: Watermark) {
        self.restore(watermark);
        self.idle = false;
    }

    /// For such a reader: the split is idle (every writer of it is), until
    /// [`advance_to`](SplitWatermarks::advance_to).
    pub fn mark_idle(&mut self) {
        self.idle = true;
    }

    /// Follows a batch of rows in arrival order. Writes into `row_watermarks` the split's
    /// watermark just before each row (the input for every lateness decision downstream).
    pub fn observe(
        &mut self,
        event_times: &[i64],
        now: ProcTime,
        row_watermarks: &mut Vec<i64>,
    ) -> Observed {
        let mut out = Observed::default();
        if event_times.is_empty() {
            return out;
        }
        self.last_row_at = Some(now);
        if self.idle {
            self.idle = false;
            out.became_active = true;
        }
        row_watermarks.reserve(event_times.len());
        let delay = self.strategy.delay_millis();
        let mut max = self.max_seen.0;
        let mut late = 0usize;
        for &t in event_times {
            let wm = if max == i64::MIN {
                i64::MIN
            } else {
                max.saturating_sub(delay)
            };
            late += (t <= wm) as usize;
            row_watermarks.push(wm);
            max = max.max(t);
        }
        self.max_seen = EventTime(max);
        out.late_rows = late;
        out
    }

    /// Restarts the idle clock without a row (a paused split is not idle).
    pub fn touch(&mut self, now: ProcTime) {
        if !self.idle {
            self.last_row_at = Some(now);
        }
    }

    /// Marks the split idle when no row came for the idle timeout. Returns true when it just
    /// became idle.
    pub fn check_idle(&mut self, now: ProcTime) -> bool {
        let (Some(timeout), false) = (self.idle_timeout_ms, self.idle) else {
            return false;
        };
        let since = self.last_row_at.unwrap_or(now);
        if self.last_row_at.is_none() {
            // A split that never produced a row starts its idle clock at the first check.
            self.last_row_at = Some(now);
            return false;
        }
        if now.0 - since.0 >= timeout {
            self.idle = true;
            return true;
        }
        false
    }
}

/// Combines the watermarks of several inputs: the minimum over the inputs that are not idle,
/// never moving backwards.
///
/// An input that has never sent a watermark holds the combination at [`Watermark::MIN`] unless
/// it is idle. When every input is idle the combined watermark stays where it is. A finished
/// input should be given [`Watermark::MAX`].
#[derive(Debug, Clone)]
pub struct WatermarkTracker {
    inputs: Vec<InputMark>,
    current: Watermark,
}

#[derive(Debug, Clone, Copy)]
struct InputMark {
    watermark: Watermark,
    idle: bool,
    ended: bool,
}

impl WatermarkTracker {
    pub fn new(inputs: usize) -> Self {
        WatermarkTracker {
            inputs: vec![
                InputMark {
                    watermark: Watermark::MIN,
                    idle: false,
                    ended: false,
                };
                inputs
            ],
            current: Watermark::MIN,
        }
    }

    pub fn inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Adds an input (a split found while running). It has no watermark yet, so it holds the
    /// combination where it is until it reports one or goes idle; the combination never moves
    /// back. Returns its index.
    pub fn add_input(&mut self) -> usize {
        self.inputs.push(InputMark {
            watermark: Watermark::MIN,
            idle: false,
            ended: false,
        });
        self.inputs.len() - 1
    }

    /// The combined watermark.
    pub fn current(&self) -> Watermark {
        self.current
    }

    /// The last watermark `input` reported.
    pub fn input_watermark(&self, input: usize) -> Watermark {
        self.inputs[input].watermark
    }

    pub fn is_idle(&self, input: usize) -> bool {
        self.inputs[input].idle
    }

    /// Whether every input is idle (then this subtask's output is idle too).
    pub fn all_idle(&self) -> bool {
        !self.inputs.is_empty() && self.inputs.iter().all(|i| i.idle)
    }

    /// Records a watermark from `input` (which makes it active). Returns the combined watermark
    /// if it advanced.
    pub fn update(&mut self, input: usize, watermark: Watermark) -> Option<Watermark> {
        let m = &mut self.inputs[input];
        // An input's own watermark never goes back either.
        m.watermark = m.watermark.max(watermark);
        m.idle = false;
        self.recompute()
    }

    /// Marks `input` ended: it never holds the watermark back again, but while other inputs
    /// are only idle (not ended) the combination does not jump to the end. Returns the
    /// combined watermark if it advanced.
    pub fn finish(&mut self, input: usize) -> Option<Watermark> {
        let m = &mut self.inputs[input];
        m.ended = true;
        m.watermark = Watermark::MAX;
        self.recompute()
    }

    /// Marks `input` idle or active. Returns the combined watermark if it advanced.
    pub fn set_idle(&mut self, input: usize, idle: bool) -> Option<Watermark> {
        self.inputs[input].idle = idle;
        self.recompute()
    }

    fn recompute(&mut self) -> Option<Watermark> {
        let min = match self
            .inputs
            .iter()
            .filter(|i| !i.idle && !i.ended)
            .map(|i| i.watermark)
            .min()
        {
            Some(m) => m,
            // Only ended and idle inputs: the end is reached when every input has ended; an
            // idle one may still send rows, so until then the watermark stays.
            None if self.inputs.iter().all(|i| i.ended) => Watermark::MAX,
            None => return None,
        };
        if min > self.current {
            self.current = min;
            Some(min)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Mark(usize, i64),
        Idle(usize, bool),
    }

    fn step(n: usize) -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..n, -1_000i64..1_000).prop_map(|(i, t)| Step::Mark(i, t)),
            1 => (0..n, any::<bool>()).prop_map(|(i, b)| Step::Idle(i, b)),
        ]
    }

    fn case() -> impl Strategy<Value = (usize, Vec<Step>)> {
        (1usize..6).prop_flat_map(|n| (Just(n), proptest::collection::vec(step(n), 0..80)))
    }

    proptest! {
        /// The combined watermark never moves backwards, whatever the inputs do.
        #[test]
        fn tracker_never_goes_backwards((n, steps) in case()) {
            let mut t = WatermarkTracker::new(n);
            let mut last = t.current();
            for s in steps {
                match s {
                    Step::Mark(i, w) => { t.update(i, Watermark(w)); }
                    Step::Idle(i, b) => { t.set_idle(i, b); }
                }
                prop_assert!(t.current() >= last);
                last = t.current();
            }
        }

        /// Whenever at least one input is active, the combined watermark is the running maximum
        /// of the minimum over the active inputs' watermarks; idle inputs are left out.
        #[test]
        fn tracker_is_min_over_active_inputs((n, steps) in case()) {
            let mut t = WatermarkTracker::new(n);
            let mut marks = vec![i64::MIN; n];
            let mut idle = vec![false; n];
            let mut expect = i64::MIN;
            for s in steps {
                match s {
                    Step::Mark(i, w) => { marks[i] = marks[i].max(w); idle[i] = false; t.update(i, Watermark(w)); }
                    Step::Idle(i, b) => { idle[i] = b; t.set_idle(i, b); }
                }
                if let Some(min) = (0..n).filter(|&i| !idle[i]).map(|i| marks[i]).min() {
                    expect = expect.max(min);
                }
                prop_assert_eq!(t.current(), Watermark(expect));
                prop_assert_eq!(t.all_idle(), idle.iter().all(|b| *b));
            }
        }

        /// An idle input never holds the watermark back: with one input idle at MIN and the
        /// others advancing, the combination follows the others.
        #[test]
        fn idle_input_does_not_hold_back(ws in proptest::collection::vec(0i64..10_000, 1..40)) {
            let mut t = WatermarkTracker::new(2);
            t.set_idle(1, true);
            let mut max = i64::MIN;
            for w in ws {
                t.update(0, Watermark(w));
                max = max.max(w);
                prop_assert_eq!(t.current(), Watermark(max));
            }
        }

        /// Per-row watermarks are "max of earlier rows − delay" and lateness is `ts <= that`.
        #[test]
        fn split_row_watermarks_follow_the_rule(
            ts in proptest::collection::vec(0i64..100_000, 0..200),
            delay in 0i64..10_000,
            cut in 0usize..200,
        ) {
            let mut s = SplitWatermarks::new(WatermarkStrategy::bounded(delay), None);
            let cut = cut.min(ts.len());
            let mut wms = Vec::new();
            let a = s.observe(&ts[..cut], ProcTime(0), &mut wms);
            let b = s.observe(&ts[cut..], ProcTime(0), &mut wms);
            let mut max = i64::MIN;
            let mut late = 0;
            for (i, &t) in ts.iter().enumerate() {
                let wm = if max == i64::MIN { i64::MIN } else { max - delay };
                prop_assert_eq!(wms[i], wm);
                if t <= wm { late += 1; }
                max = max.max(t);
            }
            prop_assert_eq!(a.late_rows + b.late_rows, late);
        }
    }

    #[test]
    fn an_ended_input_does_not_end_the_watermark_while_another_is_only_idle() {
        let mut t = WatermarkTracker::new(2);
        t.update(0, Watermark(100));
        t.update(1, Watermark(50));
        t.set_idle(1, true);
        assert_eq!(
            t.finish(0),
            None,
            "input 1 is idle, not ended: no jump to MAX"
        );
        assert_eq!(t.current(), Watermark(100));
        assert_eq!(t.update(1, Watermark(200)), Some(Watermark(200)));
        assert_eq!(t.finish(1), Some(Watermark::MAX));
    }

    #[test]
    fn split_goes_idle_after_timeout_and_back_on_data() {
        let mut s = SplitWatermarks::new(WatermarkStrategy::bounded(5_000), Some(1_000));
        let mut wms = Vec::new();
        s.observe(&[10_000], ProcTime(0), &mut wms);
        assert!(!s.check_idle(ProcTime(999)));
        assert!(s.check_idle(ProcTime(1_000)));
        assert!(s.is_idle());
        let o = s.observe(&[11_000], ProcTime(2_000), &mut wms);
        assert!(o.became_active);
        assert!(!s.is_idle());
        assert_eq!(s.watermark(), Watermark(6_000));
    }

    #[test]
    fn monotonous_keeps_ties_on_time() {
        let mut s = SplitWatermarks::new(WatermarkStrategy::Monotonous, None);
        let mut wms = Vec::new();
        let o = s.observe(&[5, 5, 6, 5], ProcTime(0), &mut wms);
        assert_eq!(o.late_rows, 1); // the last 5 comes after 6 (watermark 5)
    }
}
