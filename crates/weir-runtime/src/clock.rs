//! Processing time on tokio's timer clock.

use weir_core::time::{Clock, ProcTime};

/// Processing time on the clock tokio's timers run on: the one the runtime waits on (a
/// source's poll delay, the checkpoint interval, the rate limiter). Under tokio's paused time
/// (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`) it moves only as tokio
/// advances it, so a test of busy, backpressured or idle time, of a rate or of a timeout
/// measures the time it drives, whatever the machine's speed. Jobs in production run on
/// [`weir_core::SystemClock`]. Read it on the runtime's threads: elsewhere tokio's clock is
/// the machine's, and its readings do not follow the paused time.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start: ProcTime,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads `start` now and moves with tokio's time.
    #[allow(clippy::disallowed_methods)] // the origin of this clock's readings
    pub fn starting_at(start: ProcTime) -> Self {
        TokioClock {
            start,
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> ProcTime {
        ProcTime(self.start.0 + self.origin.elapsed().as_millis() as i64)
    }

    fn monotonic_nanos(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn moves_with_paused_time_only() {
        let c = TokioClock::starting_at(ProcTime(1_000));
        assert_eq!(c.now(), ProcTime(1_000));
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        assert_eq!(c.now(), ProcTime(1_250));
        assert_eq!(c.monotonic_nanos(), 250_000_000);
    }
}
