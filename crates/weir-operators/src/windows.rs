//! Which fixed (tumbling or hopping) windows hold an event time, at the ends of the time range
//! too: windows `[start, start + size)` whose starts are multiples of the slide.
//!
//! A window that would start before `i64::MIN` cannot be represented; a row that lies only in
//! such windows belongs to no window and becomes a dead letter with [`no_window_reason`]. A
//! window that would end after `i64::MAX` is kept, with its end saturated at `i64::MAX`.

/// The representable starts of the windows that hold `ts`, latest first (see [`starts`]).
#[derive(Debug, Clone)]
pub(crate) struct WindowStarts {
    next: Option<i64>,
    /// The lowest start to yield.
    lowest: i64,
    slide: i64,
    /// Windows that hold the event time but start before `i64::MIN`.
    pub unrepresentable: u64,
}

impl Iterator for WindowStarts {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        let s = self.next.filter(|&s| s >= self.lowest)?;
        self.next = s.checked_sub(self.slide);
        Some(s)
    }
}

/// Refuses hopping windows (`size`, `slide`) in which one row falls in more than `limit`
/// windows: each row updates that many groups. `value` describes the windows in the error,
/// `raise` says how to raise the limit where it can be.
pub(crate) fn check_windows_per_row(
    size: i64,
    slide: i64,
    limit: i64,
    value: String,
    raise: &str,
) -> weir_runtime::Result<()> {
    let n = size / slide.max(1);
    if n <= limit {
        return Ok(());
    }
    Err(weir_runtime::Error::config(
        "window",
        value,
        format!(
            "each row would fall in {n} windows (size / slide), more than the limit of {limit}; \
             its state and work grow with that number. Use a slide of at least {} ms{raise}",
            (size + limit - 1) / limit.max(1)
        ),
    ))
}

/// Refuses windows of `size` every `slide` (hopping windows, or cumulative ones: the max size
/// every step) whose size is not a whole number of slides, as Flink does, naming the two
/// nearest sizes, or in which one row falls in more than `limit` windows.
/// `names`: what the size and the slide are called, and the words before the suggested sizes.
pub(crate) fn check_slides(
    size: i64,
    slide: i64,
    limit: i64,
    what: String,
    names: [&str; 3],
) -> weir_runtime::Result<()> {
    let [size_name, slide_name, suggest] = names;
    if size % slide != 0 {
        return Err(weir_runtime::Error::config(
            "window",
            what,
            format!(
                "the {size_name} must be a whole multiple of the {slide_name} (as in Flink): use {suggest}{} ms or {} ms",
                size / slide * slide,
                (size / slide + 1) * slide
            ),
        ));
    }
    check_windows_per_row(
        size,
        slide,
        limit,
        what,
        ", or raise the limit ('weir.window.max-windows-per-row' in SQL)",
    )
}

/// The windows of `size` every `slide` (`0 < slide <= size`) that hold `ts`.
pub(crate) fn starts(ts: i64, size: i64, slide: i64) -> WindowStarts {
    let offset = ts.rem_euclid(slide);
    if let Some(before_first) = ts.checked_sub(size) {
        // Every start is above `ts - size`, so none is before i64::MIN: the common case.
        return WindowStarts {
            next: Some(ts - offset),
            lowest: before_first + 1,
            slide,
            unrepresentable: 0,
        };
    }
    let (ts, size, slide, offset) = (ts as i128, size as i128, slide as i128, offset as i128);
    let last = ts - offset;
    let all = (last - (ts - size) - 1) / slide + 1;
    let min = i64::MIN as i128;
    let representable = if last < min {
        0
    } else {
        ((last - min) / slide + 1).min(all)
    };
    WindowStarts {
        next: (representable > 0).then_some(last as i64),
        lowest: i64::MIN,
        slide: slide as i64,
        unrepresentable: (all - representable) as u64,
    }
}

/// Why a row at `ts` lies in no representable window of `size` every `slide`: its latest
/// window, with the exact bounds, starts before `i64::MIN`.
pub(crate) fn no_window_reason(ts: i64, size: i64, slide: i64) -> String {
    let last = ts as i128 - ts.rem_euclid(slide) as i128;
    let what = if slide == size {
        format!("{size} ms tumbling window")
    } else {
        format!("{size} ms window every {slide} ms")
    };
    format!(
        "event time {ts} ms lies in no window that can be represented: its latest {what} would be \
         [{last}, {}) ms, which starts before the earliest event time weir can hold \
         (i64::MIN = {} ms)",
        last + size as i128,
        i64::MIN
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The starts of the windows holding `ts`, by brute force over i128, latest first.
    fn reference(ts: i64, size: i64, slide: i64) -> (Vec<i64>, u64) {
        let (t, size, slide) = (ts as i128, size as i128, slide as i128);
        let mut s = t - t.rem_euclid(slide);
        let (mut ok, mut bad) = (Vec::new(), 0);
        while s > t - size {
            if s >= i64::MIN as i128 {
                ok.push(s as i64);
            } else {
                bad += 1;
            }
            s -= slide;
        }
        (ok, bad)
    }

    fn check(ts: i64, size: i64, slide: i64) -> std::result::Result<(), TestCaseError> {
        let mut got = starts(ts, size, slide);
        let starts: Vec<i64> = got.by_ref().collect();
        prop_assert_eq!((starts, got.unrepresentable), reference(ts, size, slide));
        Ok(())
    }

    proptest! {
        #[test]
        fn window_starts_equal_a_reference_at_the_ends_of_the_time_range(
            offset in 0i64..100,
            at_bottom in any::<bool>(),
            slide in 1i64..40,
            hops in 1i64..5,
        ) {
            let ts = if at_bottom { i64::MIN + offset } else { i64::MAX - offset };
            check(ts, slide * hops, slide)?;
            check(ts, slide * hops + offset % slide, slide)?;
        }
    }

    #[test]
    fn a_window_starting_at_i64_min_is_representable() {
        let mut w = starts(i64::MIN + 5, 1024, 1024);
        assert_eq!(w.next(), Some(i64::MIN));
        assert_eq!(w.next(), None);
        assert_eq!(w.unrepresentable, 0);
    }
}
