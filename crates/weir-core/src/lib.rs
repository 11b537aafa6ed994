//! # weir-core
//!
//! The types every other weir crate shares, with no I/O and no async runtime: the clocks and
//! time types ([`time`]), watermark generation and combination ([`watermark`]), keys and key
//! groups ([`keys`]), serialisable scalar expressions ([`expr`]), batch helpers ([`batch`]) and
//! the error type ([`Error`]), local times of a time zone ([`zone`]), and the change kinds of
//! updating streams ([`changes`]).
//!
//! ```
//! use weir_core::time::Watermark;
//! use weir_core::watermark::WatermarkTracker;
//!
//! // A two-input operator: its watermark is the minimum of its inputs'...
//! let mut t = WatermarkTracker::new(2);
//! t.update(0, Watermark(10_000));
//! assert_eq!(t.update(1, Watermark(7_000)), Some(Watermark(7_000)));
//! // ...unless an input is idle, which then stops holding it back.
//! assert_eq!(t.set_idle(1, true), Some(Watermark(10_000)));
//! ```

#![warn(clippy::unwrap_used)]
pub mod batch;
pub mod changes;
pub mod error;
pub mod expr;
pub mod keys;
pub mod time;
pub mod watermark;
pub mod zone;

pub use error::{Error, Result};
pub use time::{Clock, Epoch, EventTime, ManualClock, ProcTime, SystemClock, Watermark};
