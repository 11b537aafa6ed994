//! Local times of a time zone (the session zone of Flink SQL, `table.local-time-zone`), as
//! epoch milliseconds read on a wall clock there: what a TIMESTAMP_LTZ (an instant) reads as
//! in the zone, the instant of a local time, and the watermarks of local times.
//!
//! Generic over chrono's [`TimeZone`]: a region with DST (chrono-tz, or Arrow's `Tz`) or a
//! fixed offset.

use chrono::{DateTime, LocalResult, Offset, TimeZone};

/// The local date and time of an instant, as milliseconds since the local epoch.
pub fn local_ms<Z: TimeZone>(tz: &Z, epoch_ms: i64) -> Option<i64> {
    let utc = DateTime::from_timestamp_millis(epoch_ms)?.naive_utc();
    let offset = tz.offset_from_utc_datetime(&utc).fix().local_minus_utc();
    epoch_ms.checked_add(i64::from(offset) * 1000)
}

/// [`local_ms`] of many instants, the zone's offset looked up once per second of them (a
/// change of offset happens at a whole second): for the rows of a batch, which mostly share
/// their seconds.
#[derive(Debug)]
pub struct LocalTimes<'a, Z: TimeZone> {
    tz: &'a Z,
    /// The last second looked up and its offset in milliseconds.
    last: Option<(i64, i64)>,
}

impl<'a, Z: TimeZone> LocalTimes<'a, Z> {
    pub fn new(tz: &'a Z) -> Self {
        LocalTimes { tz, last: None }
    }

    /// The local time of the instant `epoch_ms`, as [`local_ms`] gives it.
    pub fn local_ms(&mut self, epoch_ms: i64) -> Option<i64> {
        let second = epoch_ms.div_euclid(1000);
        let offset = match self.last {
            Some((s, o)) if s == second => o,
            _ => {
                let o = local_ms(self.tz, epoch_ms)? - epoch_ms;
                self.last = Some((second, o));
                o
            }
        };
        epoch_ms.checked_add(offset)
    }
}

/// Which instant a local time that a change of offset repeats is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeated {
    /// The first (Java's `LocalDateTime.atZone`: Flink's casts).
    Earlier,
    /// The second (Java's `SimpleDateFormat`: Flink's UNIX_TIMESTAMP).
    Later,
}

/// The instant of a local date and time (milliseconds since the local epoch): a time that a
/// change of offset skips is moved on by the gap (the offset before the change applies), as
/// both of Java's ways do; a time it repeats is the instant `repeated` says.
pub fn epoch_ms<Z: TimeZone>(tz: &Z, local_ms: i64, repeated: Repeated) -> Option<i64> {
    let local = DateTime::from_timestamp_millis(local_ms)?.naive_utc();
    let offset = match tz.offset_from_local_datetime(&local) {
        LocalResult::Single(o) => o.fix(),
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (a.fix(), b.fix());
            // The earlier instant is the one of the larger offset.
            let earlier_first = a.local_minus_utc() >= b.local_minus_utc();
            match (repeated, earlier_first) {
                (Repeated::Earlier, true) | (Repeated::Later, false) => a,
                _ => b,
            }
        }
        // In a gap: the offset before it, the offset of an instant 14 hours (more than any
        // offset) before the local time read as UTC.
        LocalResult::None => {
            let before = local.checked_sub_signed(chrono::TimeDelta::hours(14))?;
            tz.offset_from_utc_datetime(&before).fix()
        }
    };
    local_ms.checked_sub(i64::from(offset.local_minus_utc()) * 1000)
}

const DAY_MS: i64 = 86_400_000;

/// The watermark `w` (an instant) of local times: the latest local time `l` such that every
/// instant whose local time is at or before `l` is at or before `w`. Outside a change of offset
/// that is `w`'s own local time. Where the offset drops (the end of DST), the local times of
/// the hour that repeats are not all passed until its second pass is: through the first pass
/// the watermark stays just before the repeated hour. So a window of local times closes when
/// every row that falls in it is at or below `w`, as Flink's windows over a TIMESTAMP_LTZ close
/// (its timer for a window's last local time is that time's later instant). Never decreases as
/// `w` grows; the ends of the range (`i64::MIN`, `i64::MAX`) map to themselves.
pub fn local_watermark<Z: TimeZone>(tz: &Z, w: i64) -> i64 {
    if w == i64::MIN || w == i64::MAX {
        return w;
    }
    let offset = |t: i64| local_ms(tz, t).map(|l| l - t);
    let Some(local) = local_ms(tz, w) else {
        return w;
    };
    let now = local - w;
    // A drop of the offset within a day (DST changes are hours apart from each other, and each
    // shifts by less than a day): find the instant it happens.
    let horizon = w.saturating_add(DAY_MS);
    match offset(horizon) {
        Some(later) if later < now => {}
        _ => return local,
    }
    let (mut lo, mut hi) = (w, horizon);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if offset(mid) == Some(now) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // `hi` is the first instant of the lower offset; local times from its own on come again.
    match local_ms(tz, hi) {
        Some(again) => local.min(again - 1),
        None => local,
    }
}

/// A watermark of local times `l` (what [`local_watermark`] gives) as an instant again: the
/// latest instant `t` such that every local time after `l` is of an instant after `t`. At or
/// before the watermark the local watermark came from (behind it by up to the repeated hour
/// at the end of DST). Never decreases as `l` grows; the ends of the range map to themselves.
pub fn instant_watermark<Z: TimeZone>(tz: &Z, l: i64) -> i64 {
    if l == i64::MIN || l == i64::MAX {
        return l;
    }
    match epoch_ms(tz, l + 1, Repeated::Earlier) {
        Some(t) => t - 1,
        None => l,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    fn ms(s: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
            .expect("a date and time")
            .and_utc()
            .timestamp_millis()
    }

    #[test]
    fn local_times_follow_dst_as_java_does() {
        let ny = chrono_tz::America::New_York;
        // 2024-03-10 07:00Z: 02:00 EST becomes 03:00 EDT.
        assert_eq!(
            local_ms(&ny, ms("2024-03-10 06:59:59.0")),
            Some(ms("2024-03-10 01:59:59.0"))
        );
        assert_eq!(
            local_ms(&ny, ms("2024-03-10 07:00:00.0")),
            Some(ms("2024-03-10 03:00:00.0"))
        );
        // A skipped local time is moved on by the gap: 02:30 is 03:30 EDT (07:30Z), as Flink's
        // UNIX_TIMESTAMP('2024-03-10 02:30:00') gives.
        let earlier = Repeated::Earlier;
        assert_eq!(
            epoch_ms(&ny, ms("2024-03-10 02:30:00.0"), earlier),
            Some(ms("2024-03-10 07:30:00.0"))
        );
        // A repeated one is the earlier instant, 01:30 EDT (05:30Z), for a CAST; the later,
        // 01:30 EST (06:30Z), for UNIX_TIMESTAMP.
        let repeated = ms("2024-11-03 01:30:00.0");
        assert_eq!(
            epoch_ms(&ny, repeated, earlier),
            Some(ms("2024-11-03 05:30:00.0"))
        );
        assert_eq!(
            epoch_ms(&ny, repeated, Repeated::Later),
            Some(ms("2024-11-03 06:30:00.0"))
        );
        let kolkata = FixedOffset::east_opt(19_800).expect("an offset");
        assert_eq!(local_ms(&kolkata, 0), Some(19_800_000));
        assert_eq!(epoch_ms(&kolkata, 19_800_000, Repeated::Later), Some(0));
    }

    #[test]
    fn local_times_of_many_instants_are_each_ones_own() {
        let ny = chrono_tz::America::New_York;
        let mut many = LocalTimes::new(&ny);
        // Every 250 ms across the spring and the autumn change, and back in time too.
        let times = (0..4 * 7200).map(|k| ms("2024-03-10 06:00:00.0") + k * 250);
        let times = times.chain((0..4 * 7200).map(|k| ms("2024-11-03 07:00:00.0") - k * 250));
        for t in times {
            assert_eq!(many.local_ms(t), local_ms(&ny, t), "{t}");
        }
    }

    #[test]
    fn local_watermarks_wait_for_the_second_pass_of_a_repeated_hour() {
        let ny = chrono_tz::America::New_York;
        let at = |s: &str| local_watermark(&ny, ms(s));
        // An ordinary time: its local time.
        assert_eq!(at("2024-01-31 15:00:00.0"), ms("2024-01-31 10:00:00.0"));
        // Spring: the local time jumps over the skipped hour.
        assert_eq!(at("2024-03-10 06:59:59.999"), ms("2024-03-10 01:59:59.999"));
        assert_eq!(at("2024-03-10 07:00:00.0"), ms("2024-03-10 03:00:00.0"));
        // Autumn: 01:00-02:00 local comes twice (05:00-06:00Z EDT, 06:00-07:00Z EST). Before
        // and through the first pass the watermark stays before 01:00 local...
        assert_eq!(at("2024-11-03 04:30:00.0"), ms("2024-11-03 00:30:00.0"));
        assert_eq!(at("2024-11-03 05:00:00.0"), ms("2024-11-03 00:59:59.999"));
        assert_eq!(at("2024-11-03 05:59:59.999"), ms("2024-11-03 00:59:59.999"));
        // ...and moves through the second.
        assert_eq!(at("2024-11-03 06:30:00.0"), ms("2024-11-03 01:30:00.0"));
        assert_eq!(at("2024-11-03 07:00:00.0"), ms("2024-11-03 02:00:00.0"));
        // A fixed offset, and the ends of the range.
        let minus = FixedOffset::west_opt(12_600).expect("an offset");
        assert_eq!(local_watermark(&minus, 12_600_000), 0);
        assert_eq!(local_watermark(&ny, i64::MAX), i64::MAX);
        assert_eq!(local_watermark(&ny, i64::MIN), i64::MIN);
    }

    #[test]
    fn instant_watermarks_undo_local_ones_and_never_run_ahead() {
        let ny = chrono_tz::America::New_York;
        // Every minute through the spring change and the autumn one: both maps never decrease,
        // and the round trip is never ahead of the watermark, behind it by at most the
        // repeated hour.
        for start in [ms("2024-03-09 23:00:00.0"), ms("2024-11-02 23:00:00.0")] {
            let (mut last_local, mut last_back) = (i64::MIN, i64::MIN);
            for t in (0..26 * 60).map(|m| start + m * 60_000) {
                let local = local_watermark(&ny, t);
                let back = instant_watermark(&ny, local);
                assert!(local >= last_local, "{t}: {local} after {last_local}");
                assert!(back >= last_back, "{t}: {back} after {last_back}");
                assert!(back <= t, "{t}: {back}");
                assert!(t - back <= 3_600_000, "{t}: {back}");
                (last_local, last_back) = (local, back);
            }
        }
        assert_eq!(
            instant_watermark(&ny, local_watermark(&ny, ms("2024-01-31 15:00:00.0"))),
            ms("2024-01-31 15:00:00.0")
        );
    }
}
