//! The three clocks of a stream processor, kept apart by type.
//!
//! - [`EventTime`]: when something happened, epoch milliseconds (UTC), read from a column.
//! - [`Watermark`]: a promise that no more rows at or below it are expected on an input.
//! - [`ProcTime`]: the machine's wall clock, read only through a [`Clock`], so tests can drive it
//!   by hand with a [`ManualClock`].
//! - [`Epoch`]: a checkpoint number.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Event time in epoch milliseconds (UTC).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct EventTime(pub i64);

impl EventTime {
    pub const MIN: EventTime = EventTime(i64::MIN);
    pub const MAX: EventTime = EventTime(i64::MAX);

    pub fn millis(self) -> i64 {
        self.0
    }

    /// `self + ms`, saturating at the ends of the range.
    pub fn plus_millis(self, ms: i64) -> EventTime {
        EventTime(self.0.saturating_add(ms))
    }
}

impl fmt::Display for EventTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_millis(self.0, f)
    }
}

/// An event-time watermark: rows with an event time at or below it are late.
///
/// [`Watermark::MIN`] means "nothing known yet"; [`Watermark::MAX`] is sent at the end of a
/// bounded input and fires every remaining event-time timer.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Watermark(pub i64);

impl Watermark {
    pub const MIN: Watermark = Watermark(i64::MIN);
    pub const MAX: Watermark = Watermark(i64::MAX);

    /// Whether a row at `t` is at or behind this watermark (and so late).
    pub fn covers(self, t: EventTime) -> bool {
        t.0 <= self.0
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    /// `Some(ms)` unless this is `MIN` ("no watermark yet") or `MAX` ("end of input").
    pub fn known(self) -> Option<i64> {
        (self != Watermark::MIN && self != Watermark::MAX).then_some(self.0)
    }
}

impl fmt::Display for Watermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Watermark::MIN => f.write_str("-inf"),
            Watermark::MAX => f.write_str("+inf"),
            Watermark(ms) => fmt_millis(ms, f),
        }
    }
}

fn fmt_millis(ms: i64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{ms}ms")
}

/// An event time as a user writes it: epoch milliseconds, or ISO-8601 (UTC unless it gives an
/// offset; a date alone is its midnight).
///
/// # Errors
/// A message naming the text and the forms taken.
pub fn parse_event_time(s: &str) -> Result<i64, String> {
    let t = s.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(d.timestamp_millis());
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(d) = chrono::NaiveDateTime::parse_from_str(t, f) {
            return Ok(d.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return Ok(d
            .and_hms_opt(0, 0, 0)
            .expect("midnight")
            .and_utc()
            .timestamp_millis());
    }
    Err(format!(
        "`{s}`: expected an event time as epoch milliseconds or ISO-8601, such as \
         2024-01-01T10:00:00Z or 2024-01-01"
    ))
}

/// A state TTL so long that the state lives to the end of the input: a batch job's, which has
/// none (as in Flink's batch execution). Far enough from the ends of `i64` that adding it to an
/// event time does not overflow.
pub const TTL_END_OF_INPUT_MS: i64 = i64::MAX / 4;

/// Epoch milliseconds as an ISO 8601 UTC time, e.g. `2024-01-01T00:00:00.000Z`.
pub fn format_utc(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1_000 % 60,
        rem % 1_000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// Processing (wall-clock) time in epoch milliseconds, read from a [`Clock`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ProcTime(pub i64);

impl ProcTime {
    pub fn millis(self) -> i64 {
        self.0
    }
}

/// A checkpoint number; epochs grow by one per checkpoint.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epoch(pub u64);

/// The only way weir code reads the wall clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Wall-clock time now.
    fn now(&self) -> ProcTime;

    /// A monotonic reading in nanoseconds from an arbitrary start, for durations only (busy,
    /// backpressured and idle time, how long a lookup took: through a [`Stopwatch`]); never a
    /// time of day.
    fn monotonic_nanos(&self) -> u64;
}

/// The machine's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place the wall clock is read
    fn now(&self) -> ProcTime {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        ProcTime(d.as_millis() as i64)
    }

    #[allow(clippy::disallowed_methods)] // durations only; never used as a time of day
    fn monotonic_nanos(&self) -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    pub fn new(start: ProcTime) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start.0)),
        }
    }

    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn set(&self, t: ProcTime) {
        self.now.store(t.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> ProcTime {
        ProcTime(self.now.load(Ordering::SeqCst))
    }

    /// Moves with [`ManualClock::now`]: work takes no time on a clock driven by hand.
    fn monotonic_nanos(&self) -> u64 {
        (self.now.load(Ordering::SeqCst).max(0) as u64).saturating_mul(1_000_000)
    }
}

/// Measures how long something took, on a [`Clock`]'s monotonic reading (so that a test on
/// a clock it drives, or on tokio's paused time, measures the time it drives, not the
/// machine's speed). Pass the same clock to every call.
///
/// It is not a clock: it cannot tell what time it is, only how long something took.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(u64);

impl Stopwatch {
    pub fn start(clock: &dyn Clock) -> Self {
        Stopwatch(clock.monotonic_nanos())
    }

    pub fn elapsed_nanos(&self, clock: &dyn Clock) -> u64 {
        clock.monotonic_nanos().saturating_sub(self.0)
    }

    /// Nanoseconds since the start, and restart.
    pub fn lap_nanos(&mut self, clock: &dyn Clock) -> u64 {
        let now = clock.monotonic_nanos();
        let d = now.saturating_sub(self.0);
        self.0 = now;
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting_matches_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc(1_704_067_200_000), "2024-01-01T00:00:00.000Z");
        assert_eq!(format_utc(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(format_utc(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(ProcTime(1_000));
        let c2 = c.clone();
        assert_eq!(c.now(), ProcTime(1_000));
        c2.advance(500);
        assert_eq!(c.now(), ProcTime(1_500));
    }

    #[test]
    fn watermark_covers_rows_at_or_below_it() {
        let wm = Watermark(10);
        assert!(wm.covers(EventTime(10)));
        assert!(wm.covers(EventTime(9)));
        assert!(!wm.covers(EventTime(11)));
        assert!(!Watermark::MIN.covers(EventTime(i64::MIN + 1)));
    }
}
