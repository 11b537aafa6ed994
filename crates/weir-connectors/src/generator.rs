//! A deterministic data generator for weir's scenarios: ad impressions and clicks (interval
//! join), orders and currency rates (temporal join) and skewed events (windowed counts), in
//! the shapes of the fixtures in `testdata/flink`.
//!
//! # Logical rows, splits and determinism
//!
//! Every scenario is a logical sequence of rows with indices `0, 1, 2, ...` (`rows` of them,
//! or unbounded). Split `s` of `splits` produces the rows `s, s + splits, s + 2 * splits, ...`
//! in that order, so the union over the splits is the same for any split count. Every value
//! of row `i` is a pure function of `(seed, i)`: a per-purpose key is drawn once from a
//! `ChaCha8Rng` seeded with `seed`, and each row's draw is `splitmix64(key + (i + 1) * γ)`
//! (γ the golden-ratio increment). The same settings give byte-identical rows.
//!
//! # Event time
//!
//! Row `i` has the base time `start_ms + i * 1000 / events_per_sec` (integer division) and
//! the event time `ts = base - d - l` where `d` is uniform in `[0, disorder_ms]` and `l` is 0,
//! or, for a `late_share` of the rows, uniform in `[10 s, 120 s]` (so those rows arrive
//! behind a 5 s watermark). Rows arrive in index order, so event time is out of order by at
//! most `disorder_ms` apart from the late rows. Every scenario has its own draws for `d` and
//! `l`.
//!
//! # Scenarios (all columns non-null; `ts` is epoch milliseconds)
//!
//! - `impressions` (`impression_id, ad_id, user_id, ts`): `impression_id = i + 1`, `ad_id` in
//!   `1..=500`, `user_id` in `1..=5000`. A `repeat_share` of the impressions reuse the
//!   (ad, user) pair of one of the 64 impressions before them (following chains of repeats,
//!   at most 64 hops), so a join on the pair is many-to-many.
//! - `clicks` (`click_id, ad_id, user_id, ts`): here `rows` counts *impression slots*: slot
//!   `j` is impression `j` of `impressions` with the same settings. With `u` a uniform draw
//!   of slot `j`, the slot has a click of impression `j` iff `u < click_share`; else it has
//!   an orphan click iff `u < click_share + p`, with `p = click_share * o / (1 - o)` for
//!   `o = orphan_click_share` (so about `o` of all clicks are orphans; a slot has at most
//!   one click). `click_id = j + 1` (the impression's id for a real click). A click's `ts` is
//!   the impression's `ts` plus a delay: one of 0, 1, 9999, 10000 or 10001 ms for an
//!   `edge_share` of the clicks, uniform in `(10 s, 15 s]` for the next `beyond_bound_share`
//!   (beyond a 10 s join bound), and uniform in `[0, 10 s]` for the rest. An orphan click has
//!   a random `ad_id` in `1..=500` and a `user_id` in `5001..=10000`, which no impression
//!   has, and its time is drawn the same way from slot `j`'s impression time. A click
//!   *arrives* at `ts + d + l` (its own disorder and lateness, as above); each split holds
//!   its clicks in a small buffer and emits them in arrival order, releasing a click once no
//!   later slot of the split can arrive before it. The buffer holds about
//!   `(click_share + p) * events_per_sec * (15 s + 2 * disorder_ms)` clicks (plus late ones).
//!   Clicks of late impressions leave the buffer at once and are usually late too.
//! - `orders` (`order_id, currency, amount, ts`): `order_id = i + 1`, `currency` uniform over
//!   `C000 .. C{currencies - 1}` (`Utf8`), `amount` (`Float64`) uniform over the cents in
//!   `[1.00, 2000.00]`.
//! - `rates` (`currency, rate, ts`), a versioned changelog: rows `0 .. currencies` are the
//!   first versions of the currencies in order, row `c` at
//!   `start_ms - disorder_ms - 120001 - 3000 * (currencies - 1 - c) - d` (before every order,
//!   even a late one); every later row `i` is a new version of a uniformly drawn currency
//!   with the usual event time of row `i`. `rate` is uniform in `[0.5, 2.0]` with 6 decimals.
//!   To pair `orders` of `n` rows with `m` rate versions over the same time span, give the
//!   rates `events_per_sec` scaled by `m / n`.
//! - `events` (`key, ts`): `key` is `celebrity` for a `hot_key_share` of the rows, else
//!   `k<n>` with `n` uniform in `0 .. keys`.
//!
//! # Rate limit
//!
//! With `rate` set, split `s` may have emitted `rate * elapsed_ms / (1000 * splits)` rows
//! (clicks: click rows), counted from the reader's first poll on the job's clock. A reader
//! ahead of that returns [`SourcePoll::Pending`] with the time until about 10 ms worth of
//! rows are due (at most one batch); it never sleeps. So a row waits at most about 10 ms
//! behind its due time, as a row of a real stream waits for nothing before it is read.
//!
//! # Positions
//!
//! A split's position ([`SourceReader::position`]) is the index of its next logical row,
//! `{"row": i}`; a reader given it back produces the rows from `i` on, the same as an
//! uninterrupted run. `clicks` also keeps the clicks generated but not yet emitted:
//! `{"slot": j, "buffered": [click_id, ...]}` (ids ascending; each is regenerated from its
//! slot), at most the buffer described above. A bounded split that is done is
//! `{"finished": true}`. The rate limit counts from the restored reader's first poll.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use weir_core::time::Clock;
use weir_runtime::graph::{spec_from_json, Registry};
use weir_runtime::metrics::SplitMetrics;
use weir_runtime::source::ReaderContext;
use weir_runtime::{Error, Result, SourceFactory, SourcePoll, SourceReader};

/// The registered source kind.
pub const KIND: &str = "generator";
/// The key of the hot share of `events`.
pub const HOT_KEY: &str = "celebrity";
/// Impressions and clicks have `ad_id` in `1..=AD_IDS`.
pub const AD_IDS: u64 = 500;
/// Impressions and real clicks have `user_id` in `1..=USER_IDS`; orphan clicks above it.
pub const USER_IDS: u64 = 5000;

const LATE_MIN_MS: i64 = 10_000;
const LATE_MAX_MS: i64 = 120_000;
const EDGE_DELAYS_MS: [i64; 5] = [0, 1, 9_999, 10_000, 10_001];
const IN_BOUND_MAX_MS: u64 = 10_000;
const BEYOND_BOUND_SPAN_MS: u64 = 5_000;
const REPEAT_WINDOW: u64 = 64;
const REPEAT_MAX_HOPS: usize = 64;
const FIRST_RATE_LEAD_MS: i64 = LATE_MAX_MS + 1;
const FIRST_RATE_SPACING_MS: i64 = 3_000;
const MAX_CURRENCIES: u64 = 1_000_000;
/// Key names up to this many are built once; more are written digit by digit.
const NAME_TABLE_MAX: u64 = 1 << 18;
/// Most rows of one batch (keeps string offsets far from `i32::MAX`).
const MAX_BATCH_ROWS: usize = 1 << 22;
/// Most click slots looked at in one poll, so a poll stays short.
const MAX_SLOTS_PER_POLL: usize = 1 << 16;

/// What the generator produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// `impression_id, ad_id, user_id, ts`
    Impressions,
    /// `click_id, ad_id, user_id, ts`, clicks on the impressions of the same settings.
    Clicks,
    /// `order_id, currency, amount, ts`
    Orders,
    /// `currency, rate, ts`: a versioned changelog of rates.
    Rates,
    /// `key, ts` with one hot key.
    Events,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Impressions => "impressions",
            Scenario::Clicks => "clicks",
            Scenario::Orders => "orders",
            Scenario::Rates => "rates",
            Scenario::Events => "events",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The schema of a scenario's rows.
pub fn schema_for(scenario: Scenario) -> SchemaRef {
    let int = |name: &str| Field::new(name, DataType::Int64, false);
    let fields = match scenario {
        Scenario::Impressions => vec![
            int("impression_id"),
            int("ad_id"),
            int("user_id"),
            int("ts"),
        ],
        Scenario::Clicks => vec![int("click_id"), int("ad_id"), int("user_id"), int("ts")],
        Scenario::Orders => vec![
            int("order_id"),
            Field::new("currency", DataType::Utf8, false),
            Field::new("amount", DataType::Float64, false),
            int("ts"),
        ],
        Scenario::Rates => vec![
            Field::new("currency", DataType::Utf8, false),
            Field::new("rate", DataType::Float64, false),
            int("ts"),
        ],
        Scenario::Events => vec![Field::new("key", DataType::Utf8, false), int("ts")],
    };
    Arc::new(Schema::new(fields))
}

/// Settings of a generator source (see the module documentation for the rules).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSpec {
    pub scenario: Scenario,
    /// Rows over all splits (clicks: impression slots); `None` is unbounded.
    #[serde(default)]
    pub rows: Option<u64>,
    /// Independent shards; split `s` produces rows `s, s + splits, ...`.
    #[serde(default = "default_splits")]
    pub splits: usize,
    /// Rows per second over the whole source; `None` is as fast as possible.
    #[serde(default)]
    pub rate: Option<u64>,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Base event time of row 0 (epoch ms).
    #[serde(default = "default_start_ms")]
    pub start_ms: i64,
    /// Event-time density: row `i` has base time `start_ms + i * 1000 / events_per_sec`.
    #[serde(default = "default_events_per_sec")]
    pub events_per_sec: u64,
    /// Each row's event time is its base time minus up to this much.
    #[serde(default = "default_disorder_ms")]
    pub disorder_ms: i64,
    /// Share of rows delayed by a further 10 to 120 s.
    #[serde(default)]
    pub late_share: f64,
    /// `events`: share of rows with the key `celebrity`.
    #[serde(default = "default_hot_key_share")]
    pub hot_key_share: f64,
    /// `events`: distinct keys besides the hot one.
    #[serde(default = "default_keys")]
    pub keys: u64,
    /// `clicks`: share of impressions with a click.
    #[serde(default = "default_click_share")]
    pub click_share: f64,
    /// `clicks`: share of clicks without an impression.
    #[serde(default = "default_orphan_click_share")]
    pub orphan_click_share: f64,
    /// `clicks`: share of clicks 10 to 15 s after their impression (beyond a 10 s bound).
    #[serde(default = "default_beyond_bound_share")]
    pub beyond_bound_share: f64,
    /// `clicks`: share of clicks exactly 0, 1, 9999, 10000 or 10001 ms after their
    /// impression (the edges of a 10 s bound).
    #[serde(default = "default_edge_share")]
    pub edge_share: f64,
    /// `impressions`: share reusing the (ad, user) pair of a recent impression.
    #[serde(default = "default_repeat_share")]
    pub repeat_share: f64,
    /// `orders`, `rates`: number of currencies (`C000`, `C001`, ...).
    #[serde(default = "default_currencies")]
    pub currencies: u64,
}

fn default_splits() -> usize {
    1
}
fn default_seed() -> u64 {
    42
}
fn default_start_ms() -> i64 {
    1_704_067_200_000
}
fn default_events_per_sec() -> u64 {
    1000
}
fn default_disorder_ms() -> i64 {
    2000
}
fn default_hot_key_share() -> f64 {
    0.8
}
fn default_keys() -> u64 {
    10_000
}
fn default_click_share() -> f64 {
    0.3
}
fn default_orphan_click_share() -> f64 {
    0.05
}
fn default_beyond_bound_share() -> f64 {
    0.05
}
fn default_edge_share() -> f64 {
    0.02
}
fn default_repeat_share() -> f64 {
    0.02
}
fn default_currencies() -> u64 {
    20
}

impl GeneratorSpec {
    /// Unbounded rows of `scenario` with the default settings.
    pub fn new(scenario: Scenario) -> Self {
        GeneratorSpec {
            scenario,
            rows: None,
            splits: default_splits(),
            rate: None,
            seed: default_seed(),
            start_ms: default_start_ms(),
            events_per_sec: default_events_per_sec(),
            disorder_ms: default_disorder_ms(),
            late_share: 0.0,
            hot_key_share: default_hot_key_share(),
            keys: default_keys(),
            click_share: default_click_share(),
            orphan_click_share: default_orphan_click_share(),
            beyond_bound_share: default_beyond_bound_share(),
            edge_share: default_edge_share(),
            repeat_share: default_repeat_share(),
            currencies: default_currencies(),
        }
    }

    fn bounded(scenario: Scenario, rows: u64) -> Self {
        GeneratorSpec {
            rows: Some(rows),
            ..GeneratorSpec::new(scenario)
        }
    }

    pub fn impressions(rows: u64) -> Self {
        Self::bounded(Scenario::Impressions, rows)
    }
    /// The clicks on `impressions(rows)` (with the same other settings).
    pub fn clicks(rows: u64) -> Self {
        Self::bounded(Scenario::Clicks, rows)
    }
    pub fn orders(rows: u64) -> Self {
        Self::bounded(Scenario::Orders, rows)
    }
    pub fn rates(rows: u64) -> Self {
        Self::bounded(Scenario::Rates, rows)
    }
    pub fn events(rows: u64) -> Self {
        Self::bounded(Scenario::Events, rows)
    }

    pub fn with_splits(mut self, splits: usize) -> Self {
        self.splits = splits;
        self
    }
    pub fn with_rate(mut self, rows_per_sec: u64) -> Self {
        self.rate = Some(rows_per_sec);
        self
    }
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    pub fn with_late_share(mut self, share: f64) -> Self {
        self.late_share = share;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// `Config` naming the setting, its value and what is allowed.
    pub fn validate(&self) -> Result<()> {
        if self.splits == 0 {
            return Err(Error::config("splits", 0, "must be at least 1"));
        }
        if self.events_per_sec == 0 {
            return Err(Error::config("events_per_sec", 0, "must be at least 1"));
        }
        if self.rate == Some(0) {
            return Err(Error::config(
                "rate",
                0,
                "must be at least 1 row per second; leave it out for no limit",
            ));
        }
        if self.disorder_ms < 0 {
            return Err(Error::config(
                "disorder_ms",
                self.disorder_ms,
                "must be at least 0",
            ));
        }
        if self.keys == 0 {
            return Err(Error::config("keys", 0, "must be at least 1"));
        }
        if self.currencies == 0 || self.currencies > MAX_CURRENCIES {
            return Err(Error::config(
                "currencies",
                self.currencies,
                format!("must be between 1 and {MAX_CURRENCIES}"),
            ));
        }
        for (name, share) in [
            ("late_share", self.late_share),
            ("hot_key_share", self.hot_key_share),
            ("click_share", self.click_share),
            ("orphan_click_share", self.orphan_click_share),
            ("beyond_bound_share", self.beyond_bound_share),
            ("edge_share", self.edge_share),
            ("repeat_share", self.repeat_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(Error::config(
                    name,
                    share,
                    "must be a share between 0 and 1",
                ));
            }
        }
        Ok(())
    }
}

/// Registers the `generator` source kind.
pub fn register(r: &mut Registry) {
    r.add_source(KIND, |s| {
        Ok(Arc::new(GeneratorSource::new(spec_from_json(KIND, s)?)?))
    });
}

/// The data generator source (kind `generator`).
#[derive(Clone)]
pub struct GeneratorSource {
    plan: Arc<Plan>,
}

impl fmt::Debug for GeneratorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneratorSource")
            .field("spec", &self.plan.spec)
            .finish()
    }
}

impl GeneratorSource {
    /// # Errors
    /// `Config` for a setting out of range (see [`GeneratorSpec::validate`]).
    pub fn new(spec: GeneratorSpec) -> Result<Self> {
        spec.validate()?;
        Ok(GeneratorSource {
            plan: Arc::new(Plan::new(spec)),
        })
    }

    pub fn settings(&self) -> &GeneratorSpec {
        &self.plan.spec
    }

    /// All rows of a bounded generator without a reader or rate limit: split 0's rows, then
    /// split 1's, and so on, in batches of at most `batch_rows`.
    ///
    /// # Errors
    /// `Config` if `rows` is not set.
    pub fn generate_all(&self, batch_rows: usize) -> Result<Vec<RecordBatch>> {
        if self.plan.spec.rows.is_none() {
            return Err(Error::config(
                "rows",
                "unbounded",
                "generating all rows needs a bounded generator",
            ));
        }
        let max = batch_rows.clamp(1, MAX_BATCH_ROWS);
        let mut out = Vec::new();
        for s in 0..self.plan.spec.splits {
            let mut g = SplitGen::new(&self.plan, s as u64);
            while !g.is_done() {
                if let Some(b) = g.next_batch(&self.plan, max)? {
                    out.push(b);
                }
            }
        }
        Ok(out)
    }
}

impl SourceFactory for GeneratorSource {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn bounded(&self) -> bool {
        self.plan.spec.rows.is_some()
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.plan.spec).expect("generator settings serialise")
    }
    fn schema(&self) -> SchemaRef {
        self.plan.schema.clone()
    }
    fn start_event_time(&self, _event_time_column: &str) -> Result<Option<i64>> {
        let g = &self.plan.spec;
        // The first rows are at most `disorder_ms` (or a late delay) before `start_ms`; rates
        // begin with each currency's first version, before every order.
        let lead = match g.scenario {
            Scenario::Rates => {
                g.disorder_ms
                    + FIRST_RATE_LEAD_MS
                    + FIRST_RATE_SPACING_MS * g.currencies.saturating_sub(1) as i64
            }
            _ => g.disorder_ms,
        };
        Ok(Some(g.start_ms - lead))
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok((0..self.plan.spec.splits)
            .map(|s| format!("{KIND}-{}-{s}", self.plan.spec.scenario))
            .collect())
    }
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        let mut gens = Vec::with_capacity(splits.len());
        for (k, &s) in splits.iter().enumerate() {
            if s >= self.plan.spec.splits {
                return Err(Error::plan(format!(
                    "source `{}`: the generator has {} splits; there is no split {s}",
                    ctx.source, self.plan.spec.splits
                )));
            }
            let g = match ctx.start_position(k) {
                None => SplitGen::new(&self.plan, s as u64),
                Some(at) => SplitGen::resume(&self.plan, s as u64, at).map_err(|why| {
                    Error::plan(format!(
                        "source `{}`: {at} is not a position of split {s} of this generator \
                         ({why}); did its settings change since the position was taken?",
                        ctx.source
                    ))
                })?,
            };
            if let (Some(len), Some(m)) = (g.len, ctx.split_metrics.get(k)) {
                m.progress_total.store(len, Relaxed);
                m.progress_done.store(g.pos, Relaxed);
            }
            gens.push(g);
        }
        Ok(Box::new(GeneratorReader {
            plan: self.plan.clone(),
            splits: gens,
            metrics: ctx.split_metrics,
            clock: ctx.clock,
            batch_rows: ctx.batch_rows.clamp(1, MAX_BATCH_ROWS),
            started_ms: None,
            turn: 0,
            paused: Vec::new(),
        }))
    }
}

// ---------------------------------------------------------------------------------------
// Draws: stateless per-row randomness.

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The splitmix64 finaliser.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in `[0, n)` (multiply-shift; `n > 0`).
#[inline]
fn below(h: u64, n: u64) -> u64 {
    ((u128::from(h) * u128::from(n)) >> 64) as u64
}

/// Uniform in `[0, 1)` with 53 bits.
#[inline]
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// True with probability `share`.
#[inline]
fn chance(h: u64, share: f64) -> bool {
    unit(h) < share
}

/// What a draw is for; each purpose has its own key.
#[derive(Debug, Clone, Copy)]
enum D {
    ImpAd,
    ImpUser,
    ImpRepeat,
    ImpRepeatBack,
    ImpDisorder,
    ImpLate,
    ImpLateBy,
    Click,
    ClickDelayKind,
    ClickDelay,
    ClickDisorder,
    ClickLate,
    ClickLateBy,
    OrphanAd,
    OrphanUser,
    OrderCurrency,
    OrderAmount,
    OrderDisorder,
    OrderLate,
    OrderLateBy,
    RateCurrency,
    RateValue,
    RateDisorder,
    RateLate,
    RateLateBy,
    EventHot,
    EventKey,
    EventDisorder,
    EventLate,
    EventLateBy,
}

const DRAW_PURPOSES: usize = D::EventLateBy as usize + 1;

/// The draws that place a row in time: disorder, lateness and how late.
#[derive(Clone, Copy)]
struct TimeDraws {
    disorder: D,
    late: D,
    late_by: D,
}

const fn time_draws(scenario: Scenario) -> TimeDraws {
    let (disorder, late, late_by) = match scenario {
        Scenario::Impressions => (D::ImpDisorder, D::ImpLate, D::ImpLateBy),
        Scenario::Clicks => (D::ClickDisorder, D::ClickLate, D::ClickLateBy),
        Scenario::Orders => (D::OrderDisorder, D::OrderLate, D::OrderLateBy),
        Scenario::Rates => (D::RateDisorder, D::RateLate, D::RateLateBy),
        Scenario::Events => (D::EventDisorder, D::EventLate, D::EventLateBy),
    };
    TimeDraws {
        disorder,
        late,
        late_by,
    }
}

/// Per-purpose keys drawn from `ChaCha8Rng(seed)`.
struct Draws {
    keys: [u64; DRAW_PURPOSES],
}

impl Draws {
    fn new(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut keys = [0; DRAW_PURPOSES];
        for k in &mut keys {
            *k = rng.next_u64();
        }
        Draws { keys }
    }

    /// Draw `d` of row `i`.
    #[inline]
    fn get(&self, d: D, i: u64) -> u64 {
        mix64(self.keys[d as usize].wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
    }
}

// ---------------------------------------------------------------------------------------
// Names: `k17`, `C003`.

struct Names {
    prefix: u8,
    width: usize,
    /// All names back to back, and where each starts (one more entry than names).
    table: Option<(Vec<u8>, Vec<u32>)>,
}

impl Names {
    fn new(prefix: u8, width: usize, count: u64) -> Self {
        let mut names = Names {
            prefix,
            width,
            table: None,
        };
        if count <= NAME_TABLE_MAX {
            let mut bytes = Vec::new();
            let mut starts = Vec::with_capacity(count as usize + 1);
            starts.push(0);
            for n in 0..count {
                names.write(&mut bytes, n);
                starts.push(bytes.len() as u32);
            }
            names.table = Some((bytes, starts));
        }
        names
    }

    fn write(&self, out: &mut Vec<u8>, mut n: u64) {
        let mut digits = [b'0'; 20];
        let mut p = digits.len();
        loop {
            p -= 1;
            digits[p] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        out.push(self.prefix);
        let len = digits.len() - p;
        out.extend(std::iter::repeat_n(b'0', self.width.saturating_sub(len)));
        out.extend_from_slice(&digits[p..]);
    }

    #[inline]
    fn push(&self, out: &mut Vec<u8>, n: u64) {
        match &self.table {
            Some((bytes, starts)) => {
                let n = n as usize;
                out.extend_from_slice(&bytes[starts[n] as usize..starts[n + 1] as usize]);
            }
            None => self.write(out, n),
        }
    }
}

/// A non-null `Utf8` column built from bytes and offsets.
struct Utf8Column {
    bytes: Vec<u8>,
    offsets: Vec<i32>,
}

impl Utf8Column {
    fn with_capacity(rows: usize, bytes_per_row: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Utf8Column {
            bytes: Vec::with_capacity(rows * bytes_per_row),
            offsets,
        }
    }

    #[inline]
    fn end_row(&mut self) {
        self.offsets.push(self.bytes.len() as i32);
    }

    fn finish(self) -> ArrayRef {
        Arc::new(StringArray::new(
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            Buffer::from_vec(self.bytes),
            None,
        ))
    }
}

fn int64(v: Vec<i64>) -> ArrayRef {
    Arc::new(Int64Array::from(v))
}

fn float64(v: Vec<f64>) -> ArrayRef {
    Arc::new(Float64Array::from(v))
}

// ---------------------------------------------------------------------------------------
// The plan: settings plus everything derived from them once.

struct Plan {
    spec: GeneratorSpec,
    schema: SchemaRef,
    draws: Draws,
    times: TimeDraws,
    /// `disorder_ms + 1`.
    disorder_span: u64,
    /// A slot with click draw below this has a click (real below `click_share`).
    click_cut: f64,
    /// `k<n>` for events, `C<nnn>` for orders and rates.
    names: Option<Names>,
}

/// One click: ordered by arrival, then id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ClickRow {
    arrival: i64,
    id: i64,
    ad: i64,
    user: i64,
    ts: i64,
}

impl Plan {
    fn new(spec: GeneratorSpec) -> Self {
        let o = spec.orphan_click_share;
        let orphan_p = if o >= 1.0 {
            1.0
        } else {
            spec.click_share * o / (1.0 - o)
        };
        let names = match spec.scenario {
            Scenario::Events => Some(Names::new(b'k', 0, spec.keys)),
            Scenario::Orders | Scenario::Rates => Some(Names::new(b'C', 3, spec.currencies)),
            Scenario::Impressions | Scenario::Clicks => None,
        };
        Plan {
            schema: schema_for(spec.scenario),
            draws: Draws::new(spec.seed),
            times: time_draws(spec.scenario),
            disorder_span: spec.disorder_ms as u64 + 1,
            click_cut: (spec.click_share + orphan_p).min(1.0),
            names,
            spec,
        }
    }

    /// How far row `i`'s event time lies before its base (or arrival) time.
    #[inline]
    fn shift(&self, t: TimeDraws, i: u64) -> i64 {
        let mut s = if self.disorder_span > 1 {
            below(self.draws.get(t.disorder, i), self.disorder_span) as i64
        } else {
            0
        };
        if self.spec.late_share > 0.0 && chance(self.draws.get(t.late, i), self.spec.late_share) {
            let span = (LATE_MAX_MS - LATE_MIN_MS + 1) as u64;
            s += LATE_MIN_MS + below(self.draws.get(t.late_by, i), span) as i64;
        }
        s
    }

    /// The (ad, user) pair of impression `j`.
    fn impression_pair(&self, j: u64) -> (i64, i64) {
        let mut j = j;
        if self.spec.repeat_share > 0.0 {
            for _ in 0..REPEAT_MAX_HOPS {
                if j == 0 || !chance(self.draws.get(D::ImpRepeat, j), self.spec.repeat_share) {
                    break;
                }
                j -= 1 + below(self.draws.get(D::ImpRepeatBack, j), j.min(REPEAT_WINDOW));
            }
        }
        (
            1 + below(self.draws.get(D::ImpAd, j), AD_IDS) as i64,
            1 + below(self.draws.get(D::ImpUser, j), USER_IDS) as i64,
        )
    }

    /// The event time of impression `j` with base time `base`.
    #[inline]
    fn impression_ts(&self, j: u64, base: i64) -> i64 {
        base - self.shift(time_draws(Scenario::Impressions), j)
    }

    /// The click of slot `j` (whose base time is `base`), if it has one.
    fn click(&self, j: u64, base: i64) -> Option<ClickRow> {
        let u = unit(self.draws.get(D::Click, j));
        if u >= self.click_cut {
            return None;
        }
        let real = u < self.spec.click_share;
        let kind = unit(self.draws.get(D::ClickDelayKind, j));
        let h = self.draws.get(D::ClickDelay, j);
        let delay = if kind < self.spec.edge_share {
            EDGE_DELAYS_MS[below(h, EDGE_DELAYS_MS.len() as u64) as usize]
        } else if kind < self.spec.edge_share + self.spec.beyond_bound_share {
            (IN_BOUND_MAX_MS + 1 + below(h, BEYOND_BOUND_SPAN_MS)) as i64
        } else {
            below(h, IN_BOUND_MAX_MS + 1) as i64
        };
        let ts = self.impression_ts(j, base) + delay;
        let (ad, user) = if real {
            self.impression_pair(j)
        } else {
            (
                1 + below(self.draws.get(D::OrphanAd, j), AD_IDS) as i64,
                (USER_IDS + 1 + below(self.draws.get(D::OrphanUser, j), USER_IDS)) as i64,
            )
        };
        Some(ClickRow {
            arrival: ts + self.shift(self.times, j),
            id: j as i64 + 1,
            ad,
            user,
            ts,
        })
    }
}

// ---------------------------------------------------------------------------------------
// One split.

/// Base times of the rows `first, first + stride, ...` without a division per row.
struct Ticks {
    ms: i64,
    rem: u64,
    step_ms: i64,
    step_rem: u64,
    per_sec: u64,
}

impl Ticks {
    fn new(start_ms: i64, per_sec: u64, first: u64, stride: u64) -> Self {
        let num = u128::from(first) * 1000;
        let step = u128::from(stride) * 1000;
        let per = u128::from(per_sec);
        Ticks {
            ms: start_ms + (num / per) as i64,
            rem: (num % per) as u64,
            step_ms: (step / per) as i64,
            step_rem: (step % per) as u64,
            per_sec,
        }
    }

    /// The next base time.
    #[inline]
    fn peek(&self) -> i64 {
        self.ms
    }

    /// The next base time, and moves on.
    #[inline]
    fn advance(&mut self) -> i64 {
        let t = self.ms;
        self.ms += self.step_ms;
        self.rem += self.step_rem;
        if self.rem >= self.per_sec {
            self.rem -= self.per_sec;
            self.ms += 1;
        }
        t
    }
}

struct SplitGen {
    split: u64,
    stride: u64,
    /// Logical positions done (rows; clicks: slots).
    pos: u64,
    /// Logical positions in the split; `None`: unbounded.
    len: Option<u64>,
    ticks: Ticks,
    /// Clicks generated but not yet emitted, earliest arrival first.
    clicks: BinaryHeap<Reverse<ClickRow>>,
    /// Rows emitted (for the rate limit).
    emitted: u64,
    /// `SplitFinished` was returned.
    reported: bool,
}

impl SplitGen {
    fn new(plan: &Plan, split: u64) -> Self {
        let stride = plan.spec.splits as u64;
        let len = plan.spec.rows.map(|rows| {
            if split < rows {
                (rows - split - 1) / stride + 1
            } else {
                0
            }
        });
        SplitGen {
            split,
            stride,
            pos: 0,
            len,
            ticks: Ticks::new(plan.spec.start_ms, plan.spec.events_per_sec, split, stride),
            clicks: BinaryHeap::new(),
            emitted: 0,
            reported: false,
        }
    }

    /// Split `split` going on at `at`, a position [`SplitGen::position`] returned.
    fn resume(
        plan: &Plan,
        split: u64,
        at: &serde_json::Value,
    ) -> std::result::Result<Self, String> {
        let mut g = SplitGen::new(plan, split);
        let o = at.as_object().ok_or("not a JSON object")?;
        if o.get("finished").and_then(serde_json::Value::as_bool) == Some(true) {
            g.pos = g.len.ok_or("an unbounded split never finishes")?;
            return Ok(g);
        }
        let clicks = plan.spec.scenario == Scenario::Clicks;
        let name = if clicks { "slot" } else { "row" };
        let next = o
            .get(name)
            .and_then(serde_json::Value::as_u64)
            .ok_or(format!("no `{name}`"))?;
        let of_split = |i: u64| i >= split && (i - split).is_multiple_of(g.stride);
        if !of_split(next) {
            return Err(format!("{name} {next} is not one of the split"));
        }
        let pos = (next - split) / g.stride;
        if g.len.is_some_and(|len| pos > len) {
            return Err(format!("{name} {next} is past the end of the split"));
        }
        g.pos = pos;
        g.ticks = Ticks::new(plan.spec.start_ms, plan.spec.events_per_sec, next, g.stride);
        if clicks {
            let ids = o
                .get("buffered")
                .and_then(serde_json::Value::as_array)
                .ok_or("no `buffered`")?;
            for id in ids {
                let j = id
                    .as_u64()
                    .and_then(|id| id.checked_sub(1))
                    .filter(|&j| of_split(j) && j < next)
                    .ok_or(format!("{id} is not a click id of a slot before {next}"))?;
                let base =
                    Ticks::new(plan.spec.start_ms, plan.spec.events_per_sec, j, g.stride).peek();
                let c = plan
                    .click(j, base)
                    .ok_or(format!("slot {j} has no click"))?;
                g.clicks.push(Reverse(c));
            }
        }
        Ok(g)
    }

    /// Where the split stands: see the module docs.
    fn position(&self, plan: &Plan) -> serde_json::Value {
        if self.is_done() {
            return serde_json::json!({ "finished": true });
        }
        let next = self.split + self.pos * self.stride;
        if plan.spec.scenario != Scenario::Clicks {
            return serde_json::json!({ "row": next });
        }
        let mut ids: Vec<i64> = self.clicks.iter().map(|Reverse(c)| c.id).collect();
        ids.sort_unstable();
        serde_json::json!({ "slot": next, "buffered": ids })
    }

    fn remaining(&self) -> u64 {
        self.len.map_or(u64::MAX, |len| len - self.pos)
    }

    fn is_done(&self) -> bool {
        self.remaining() == 0 && self.clicks.is_empty()
    }

    /// Up to `max` more rows; `None` when none are ready (the split may be done).
    fn next_batch(&mut self, plan: &Plan, max: usize) -> Result<Option<RecordBatch>> {
        let columns = match plan.spec.scenario {
            Scenario::Clicks => self.clicks_batch(plan, max),
            scenario => {
                let n = self.remaining().min(max as u64) as usize;
                if n == 0 {
                    return Ok(None);
                }
                let first = self.split + self.pos * self.stride;
                let columns = match scenario {
                    Scenario::Impressions => self.impressions(plan, first, n),
                    Scenario::Orders => self.orders(plan, first, n),
                    Scenario::Rates => self.rates(plan, first, n),
                    _ => self.events(plan, first, n),
                };
                self.pos += n as u64;
                Some(columns)
            }
        };
        match columns {
            Some(c) => Ok(Some(RecordBatch::try_new(plan.schema.clone(), c)?)),
            None => Ok(None),
        }
    }

    fn impressions(&mut self, plan: &Plan, first: u64, n: usize) -> Vec<ArrayRef> {
        let (mut id, mut ad, mut user, mut ts) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut i = first;
        for _ in 0..n {
            let base = self.ticks.advance();
            let (a, u) = plan.impression_pair(i);
            id.push(i as i64 + 1);
            ad.push(a);
            user.push(u);
            ts.push(plan.impression_ts(i, base));
            i += self.stride;
        }
        vec![int64(id), int64(ad), int64(user), int64(ts)]
    }

    fn orders(&mut self, plan: &Plan, first: u64, n: usize) -> Vec<ArrayRef> {
        let names = plan.names.as_ref().expect("orders have currency names");
        let (mut id, mut amount, mut ts) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut currency = Utf8Column::with_capacity(n, 4);
        let mut i = first;
        for _ in 0..n {
            let base = self.ticks.advance();
            id.push(i as i64 + 1);
            let c = below(plan.draws.get(D::OrderCurrency, i), plan.spec.currencies);
            names.push(&mut currency.bytes, c);
            currency.end_row();
            let cents = 100 + below(plan.draws.get(D::OrderAmount, i), 199_901);
            amount.push(cents as f64 / 100.0);
            ts.push(base - plan.shift(plan.times, i));
            i += self.stride;
        }
        vec![int64(id), currency.finish(), float64(amount), int64(ts)]
    }

    fn rates(&mut self, plan: &Plan, first: u64, n: usize) -> Vec<ArrayRef> {
        let names = plan.names.as_ref().expect("rates have currency names");
        let currencies = plan.spec.currencies;
        let (mut rate, mut ts) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut currency = Utf8Column::with_capacity(n, 4);
        let mut i = first;
        for _ in 0..n {
            let base = self.ticks.advance();
            let micros = 500_000 + below(plan.draws.get(D::RateValue, i), 1_500_001);
            rate.push(micros as f64 / 1e6);
            if i < currencies {
                names.push(&mut currency.bytes, i);
                let d = below(plan.draws.get(plan.times.disorder, i), plan.disorder_span);
                ts.push(
                    plan.spec.start_ms
                        - plan.spec.disorder_ms
                        - FIRST_RATE_LEAD_MS
                        - FIRST_RATE_SPACING_MS * (currencies - 1 - i) as i64
                        - d as i64,
                );
            } else {
                let c = below(plan.draws.get(D::RateCurrency, i), currencies);
                names.push(&mut currency.bytes, c);
                ts.push(base - plan.shift(plan.times, i));
            }
            currency.end_row();
            i += self.stride;
        }
        vec![currency.finish(), float64(rate), int64(ts)]
    }

    fn events(&mut self, plan: &Plan, first: u64, n: usize) -> Vec<ArrayRef> {
        let names = plan.names.as_ref().expect("events have key names");
        let hot = plan.spec.hot_key_share;
        let keys = plan.spec.keys;
        let mut key = Utf8Column::with_capacity(n, HOT_KEY.len());
        let mut ts = Vec::with_capacity(n);
        let mut i = first;
        for _ in 0..n {
            let base = self.ticks.advance();
            if chance(plan.draws.get(D::EventHot, i), hot) {
                key.bytes.extend_from_slice(HOT_KEY.as_bytes());
            } else {
                names.push(&mut key.bytes, below(plan.draws.get(D::EventKey, i), keys));
            }
            key.end_row();
            ts.push(base - plan.shift(plan.times, i));
            i += self.stride;
        }
        vec![key.finish(), int64(ts)]
    }

    /// Releases buffered clicks in arrival order, generating slots as needed.
    fn clicks_batch(&mut self, plan: &Plan, max: usize) -> Option<Vec<ArrayRef>> {
        let mut rows: Vec<ClickRow> = Vec::with_capacity(max.min(8192));
        let mut slots = 0;
        while rows.len() < max {
            let exhausted = self.remaining() == 0;
            // No later slot of this split arrives before its base time minus the disorder.
            let bound = self.ticks.peek() - plan.spec.disorder_ms;
            if let Some(Reverse(top)) = self.clicks.peek() {
                if exhausted || top.arrival < bound {
                    rows.push(*top);
                    self.clicks.pop();
                    continue;
                }
            }
            if exhausted || slots == MAX_SLOTS_PER_POLL {
                break;
            }
            let j = self.split + self.pos * self.stride;
            let base = self.ticks.advance();
            self.pos += 1;
            slots += 1;
            if let Some(c) = plan.click(j, base) {
                self.clicks.push(Reverse(c));
            }
        }
        if rows.is_empty() {
            return None;
        }
        let (mut id, mut ad, mut user, mut ts) = (
            Vec::with_capacity(rows.len()),
            Vec::with_capacity(rows.len()),
            Vec::with_capacity(rows.len()),
            Vec::with_capacity(rows.len()),
        );
        for r in &rows {
            id.push(r.id);
            ad.push(r.ad);
            user.push(r.user);
            ts.push(r.ts);
        }
        Some(vec![int64(id), int64(ad), int64(user), int64(ts)])
    }
}

// ---------------------------------------------------------------------------------------
// The reader.

struct GeneratorReader {
    plan: Arc<Plan>,
    splits: Vec<SplitGen>,
    metrics: Vec<Arc<SplitMetrics>>,
    clock: Arc<dyn Clock>,
    batch_rows: usize,
    /// Clock time of the first poll (rate limit only).
    started_ms: Option<i64>,
    turn: usize,
    /// Splits paused by watermark alignment.
    paused: Vec<bool>,
}

impl GeneratorReader {
    /// Rows split `g` may still emit after `elapsed_ms`, or the wait until a batch is due.
    fn allowance(
        &self,
        g: &SplitGen,
        rate: u64,
        elapsed_ms: u64,
    ) -> std::result::Result<usize, u64> {
        let per = u128::from(g.stride) * 1000;
        let rate = u128::from(rate);
        let due = rate * u128::from(elapsed_ms) / per;
        let emitted = u128::from(g.emitted);
        if due > emitted {
            return Ok((due - emitted).min(self.batch_rows as u128) as usize);
        }
        // Wait for about 10 ms worth of rows (at least one, at most a batch).
        let target = (rate * 10 / per).clamp(1, self.batch_rows as u128);
        let at_ms = ((emitted + target) * per).div_ceil(rate);
        let wait = at_ms.saturating_sub(u128::from(elapsed_ms)).max(1);
        Err(wait.min(u128::from(u64::MAX)) as u64)
    }
}

impl SourceReader for GeneratorReader {
    /// A generator split makes rows until its end (at its rate, if it has one): never idle.
    fn has_ready_rows(&self, split: usize) -> bool {
        self.splits.get(split).is_some_and(|g| !g.is_done())
    }

    fn position(&self, split: usize) -> Option<serde_json::Value> {
        Some(self.splits.get(split)?.position(&self.plan))
    }

    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        self.paused.resize(self.splits.len(), false);
        self.paused[split] = paused;
        true
    }

    fn poll(&mut self) -> Result<SourcePoll> {
        self.paused.resize(self.splits.len(), false);
        let elapsed_ms = self.plan.spec.rate.map(|_| {
            let now = self.clock.now().millis();
            let start = *self.started_ms.get_or_insert(now);
            now.saturating_sub(start).max(0) as u64
        });
        let n = self.splits.len();
        let mut wait: Option<u64> = None;
        for _ in 0..n {
            let k = self.turn % n;
            self.turn = self.turn.wrapping_add(1);
            let g = &self.splits[k];
            if g.reported {
                continue;
            }
            if g.is_done() {
                self.splits[k].reported = true;
                return Ok(SourcePoll::SplitFinished(k));
            }
            if self.paused[k] {
                wait = Some(wait.map_or(5, |v| v.min(5)));
                continue;
            }
            let max = match (self.plan.spec.rate, elapsed_ms) {
                (Some(rate), Some(e)) => match self.allowance(g, rate, e) {
                    Ok(max) => max,
                    Err(w) => {
                        wait = Some(wait.map_or(w, |v| v.min(w)));
                        continue;
                    }
                },
                _ => self.batch_rows,
            };
            let g = &mut self.splits[k];
            let batch = g.next_batch(&self.plan, max)?;
            if let (Some(_), Some(m)) = (g.len, self.metrics.get(k)) {
                m.progress_done.store(g.pos, Relaxed);
            }
            match batch {
                Some(batch) => {
                    g.emitted += batch.num_rows() as u64;
                    return Ok(SourcePoll::Batch { split: k, batch });
                }
                None if g.is_done() => {
                    g.reported = true;
                    return Ok(SourcePoll::SplitFinished(k));
                }
                // Clicks: a long stretch of slots without a click; go on at the next poll.
                None => wait = Some(0),
            }
        }
        if self.splits.iter().all(|g| g.reported) {
            return Ok(SourcePoll::Finished);
        }
        Ok(SourcePoll::Pending {
            wait_ms: wait.unwrap_or(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type};
    use weir_core::time::ProcTime;
    use weir_core::ManualClock;
    use weir_runtime::source::DeadLetters;

    use super::*;

    fn all(spec: GeneratorSpec) -> Vec<RecordBatch> {
        GeneratorSource::new(spec)
            .unwrap()
            .generate_all(1000)
            .unwrap()
    }

    fn ints(b: &RecordBatch, col: &str) -> Vec<i64> {
        b.column_by_name(col)
            .unwrap()
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    }

    fn floats(b: &RecordBatch, col: &str) -> Vec<f64> {
        b.column_by_name(col)
            .unwrap()
            .as_primitive::<Float64Type>()
            .values()
            .to_vec()
    }

    fn strings(b: &RecordBatch, col: &str) -> Vec<String> {
        b.column_by_name(col)
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|s| s.unwrap().to_string())
            .collect()
    }

    /// Rows as text, in order.
    fn rows(batches: &[RecordBatch]) -> Vec<String> {
        let mut out = Vec::new();
        for b in batches {
            for r in 0..b.num_rows() {
                let fields: Vec<_> = b
                    .columns()
                    .iter()
                    .map(|c| arrow_cast::display::array_value_to_string(c, r).unwrap())
                    .collect();
                out.push(fields.join(","));
            }
        }
        out
    }

    fn every_scenario(rows: u64) -> Vec<GeneratorSpec> {
        vec![
            GeneratorSpec::impressions(rows),
            GeneratorSpec::clicks(rows),
            GeneratorSpec::orders(rows),
            GeneratorSpec::rates(rows),
            GeneratorSpec::events(rows),
        ]
    }

    fn reader(
        src: &GeneratorSource,
        splits: Vec<usize>,
        clock: Arc<dyn Clock>,
        batch_rows: usize,
    ) -> (Box<dyn SourceReader>, Vec<Arc<SplitMetrics>>) {
        let metrics: Vec<_> = splits
            .iter()
            .map(|s| Arc::new(SplitMetrics::new(format!("split-{s}"))))
            .collect();
        let ctx = ReaderContext {
            source: "gen".into(),
            subtask: 0,
            parallelism: 1,
            batch_rows,
            clock,
            dead_letters: DeadLetters::new(None),
            split_metrics: metrics.clone(),
            start_positions: Vec::new(),
            checkpointing: false,
            batch_execution: false,
        };
        (src.create_reader(splits, ctx).unwrap(), metrics)
    }

    #[test]
    fn same_seed_gives_identical_batches() {
        for spec in every_scenario(3000) {
            let spec = spec.with_splits(3).with_late_share(0.02);
            let a = all(spec.clone());
            let b = all(spec.clone());
            assert_eq!(a, b, "{}", spec.scenario);
            let c = all(spec.clone().with_seed(7));
            assert_ne!(rows(&a), rows(&c), "{}", spec.scenario);
        }
    }

    #[test]
    fn split_count_does_not_change_the_rows() {
        for spec in every_scenario(5000) {
            let mut one = rows(&all(spec.clone()));
            one.sort();
            for splits in [2, 3, 7] {
                let mut many = rows(&all(spec.clone().with_splits(splits)));
                many.sort();
                assert_eq!(one, many, "{} with {splits} splits", spec.scenario);
            }
        }
    }

    #[test]
    fn reader_reads_every_split_and_finishes() {
        let src = GeneratorSource::new(GeneratorSpec::clicks(4000).with_splits(3)).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(ProcTime(0)));
        let (mut r, metrics) = reader(&src, vec![0, 1, 2], clock, 100);
        let mut got = Vec::new();
        let mut finished = HashSet::new();
        loop {
            match r.poll().unwrap() {
                SourcePoll::Batch { split, batch } => {
                    assert!(batch.num_rows() <= 100);
                    assert!(!finished.contains(&split));
                    got.push(batch);
                }
                SourcePoll::SplitFinished(k) => assert!(finished.insert(k)),
                SourcePoll::Pending { .. } => panic!("an unthrottled reader never waits"),
                SourcePoll::NewSplit(_) => panic!("the generator's splits are fixed"),
                SourcePoll::Stamped { .. } | SourcePoll::SplitWatermark { .. } => {
                    panic!("the generator's rows get their watermarks from the runtime")
                }
                SourcePoll::Finished => break,
            }
        }
        assert_eq!(finished.len(), 3);
        let mut a = rows(&got);
        let mut b = rows(&src.generate_all(8192).unwrap());
        a.sort();
        b.sort();
        assert_eq!(a, b);
        let total: u64 = metrics.iter().map(|m| m.progress_total.load(Relaxed)).sum();
        let done: u64 = metrics.iter().map(|m| m.progress_done.load(Relaxed)).sum();
        assert_eq!((total, done), (4000, 4000));
    }

    #[test]
    fn events_hot_key_share() {
        let batches = all(GeneratorSpec::events(50_000));
        let keys: Vec<String> = batches.iter().flat_map(|b| strings(b, "key")).collect();
        assert_eq!(keys.len(), 50_000);
        let hot = keys.iter().filter(|k| *k == HOT_KEY).count() as f64 / 50_000.0;
        assert!((hot - 0.8).abs() <= 0.02, "hot share {hot}");
        for k in keys.iter().filter(|k| *k != HOT_KEY) {
            let n: u64 = k.strip_prefix('k').unwrap().parse().unwrap();
            assert!(n < 10_000);
        }
        let distinct: HashSet<_> = keys.iter().collect();
        assert!(distinct.len() > 5000, "{} distinct keys", distinct.len());
    }

    #[test]
    fn event_times_follow_the_rules() {
        let spec = GeneratorSpec::events(20_000);
        let ts: Vec<i64> = all(spec.clone())
            .iter()
            .flat_map(|b| ints(b, "ts"))
            .collect();
        let mut max_seen = i64::MIN;
        for (i, &t) in ts.iter().enumerate() {
            let base = spec.start_ms + i as i64;
            assert!((base - 2000..=base).contains(&t), "row {i}: {t}");
            assert!(t >= max_seen.saturating_sub(2000));
            max_seen = max_seen.max(t);
        }
        // Late rows: about 2 %, 10-120 s behind their base time.
        let late = all(spec.clone().with_late_share(0.02));
        let ts: Vec<i64> = late.iter().flat_map(|b| ints(b, "ts")).collect();
        let behind = ts
            .iter()
            .enumerate()
            .filter(|&(i, &t)| t < spec.start_ms + i as i64 - 2000)
            .inspect(|&(i, &t)| {
                let by = spec.start_ms + i as i64 - t;
                assert!((10_000..=122_000).contains(&by));
            })
            .count() as f64;
        assert!(
            (behind / 20_000.0 - 0.02).abs() < 0.005,
            "{behind} late rows"
        );
    }

    #[test]
    fn clicks_reference_impressions() {
        let n = 20_000;
        let imps = all(GeneratorSpec::impressions(n));
        let clicks = all(GeneratorSpec::clicks(n));
        let mut by_id = HashMap::new();
        let mut pairs: HashMap<(i64, i64), usize> = HashMap::new();
        for b in &imps {
            let (id, ad, user, ts) = (
                ints(b, "impression_id"),
                ints(b, "ad_id"),
                ints(b, "user_id"),
                ints(b, "ts"),
            );
            for r in 0..b.num_rows() {
                assert!((1..=500).contains(&ad[r]) && (1..=5000).contains(&user[r]));
                by_id.insert(id[r], (ad[r], user[r], ts[r]));
                *pairs.entry((ad[r], user[r])).or_default() += 1;
            }
        }
        let repeated = pairs.values().filter(|&&c| c > 1).count();
        assert!(repeated > 200, "{repeated} repeated pairs");

        let (mut real, mut orphans, mut beyond, mut edges) = (0, 0, 0, 0);
        let mut max_seen = i64::MIN;
        for b in &clicks {
            let (id, ad, user, ts) = (
                ints(b, "click_id"),
                ints(b, "ad_id"),
                ints(b, "user_id"),
                ints(b, "ts"),
            );
            for r in 0..b.num_rows() {
                assert!(
                    ts[r] >= max_seen.saturating_sub(2000),
                    "clicks arrive in time order"
                );
                max_seen = max_seen.max(ts[r]);
                if user[r] > 5000 {
                    orphans += 1;
                    assert!(user[r] <= 10_000);
                    assert!(!pairs.contains_key(&(ad[r], user[r])));
                    continue;
                }
                real += 1;
                let (iad, iuser, its) = by_id[&id[r]];
                assert_eq!((ad[r], user[r]), (iad, iuser));
                let delay = ts[r] - its;
                assert!((0..=15_000).contains(&delay), "delay {delay}");
                beyond += usize::from(delay > 10_000);
                edges += usize::from(EDGE_DELAYS_MS.contains(&delay));
            }
        }
        let total = (real + orphans) as f64;
        assert!((real as f64 / n as f64 - 0.3).abs() < 0.02, "{real} clicks");
        assert!(
            (orphans as f64 / total - 0.05).abs() < 0.015,
            "{orphans} orphans"
        );
        assert!(
            beyond as f64 / real as f64 > 0.04,
            "{beyond} beyond the bound"
        );
        assert!(edges as f64 / real as f64 > 0.015, "{edges} on the edges");
    }

    #[test]
    fn orders_and_rates() {
        let orders = all(GeneratorSpec::orders(5000));
        let mut currencies = HashSet::new();
        let mut first_order = i64::MAX;
        for b in &orders {
            for a in floats(b, "amount") {
                assert!((1.0..=2000.0).contains(&a));
                assert_eq!(((a * 100.0).round() / 100.0).to_bits(), a.to_bits());
            }
            currencies.extend(strings(b, "currency"));
            first_order = first_order.min(ints(b, "ts").into_iter().min().unwrap());
        }
        assert_eq!(currencies.len(), 20);
        assert!(currencies.contains("C000") && currencies.contains("C019"));

        let spec = GeneratorSpec::rates(500);
        let rates = all(spec.clone());
        let names: Vec<String> = rates.iter().flat_map(|b| strings(b, "currency")).collect();
        let ts: Vec<i64> = rates.iter().flat_map(|b| ints(b, "ts")).collect();
        let values: Vec<f64> = rates.iter().flat_map(|b| floats(b, "rate")).collect();
        for c in 0..20 {
            assert_eq!(names[c], format!("C{c:03}"));
            assert!(ts[c] < spec.start_ms - 2000 - 120_000);
            assert!(ts[c] < first_order);
        }
        assert!(ts[20..].iter().all(|&t| t > spec.start_ms - 2001));
        for v in values {
            assert!((0.5..=2.0).contains(&v));
            assert_eq!(((v * 1e6).round() / 1e6).to_bits(), v.to_bits());
        }
    }

    #[test]
    fn throttled_reader_waits_for_its_clock() {
        let clock = ManualClock::new(ProcTime(1_000_000));
        let src =
            GeneratorSource::new(GeneratorSpec::new(Scenario::Events).with_rate(1000)).unwrap();
        let (mut r, _) = reader(&src, vec![0], Arc::new(clock.clone()), 8192);
        match r.poll().unwrap() {
            SourcePoll::Pending { wait_ms } => assert!((1..=10).contains(&wait_ms)),
            other => panic!("expected Pending, got {other:?}"),
        }
        clock.advance(500);
        let mut got = 0;
        loop {
            match r.poll().unwrap() {
                SourcePoll::Batch { batch, .. } => got += batch.num_rows(),
                SourcePoll::Pending { wait_ms } => {
                    assert_eq!(
                        wait_ms, 10,
                        "10 ms worth of rows: 10 rows at 1,000 a second"
                    );
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got, 500);
        clock.advance(20_000);
        let mut got = 0;
        while let SourcePoll::Batch { batch, .. } = r.poll().unwrap() {
            assert!(batch.num_rows() <= 8192);
            got += batch.num_rows();
        }
        assert_eq!(got, 20_000);
    }

    #[test]
    fn settings_are_checked_and_round_trip() {
        let bad = [
            GeneratorSpec::events(10).with_splits(0),
            GeneratorSpec {
                events_per_sec: 0,
                ..GeneratorSpec::events(10)
            },
            GeneratorSpec {
                hot_key_share: 1.5,
                ..GeneratorSpec::events(10)
            },
            GeneratorSpec {
                click_share: f64::NAN,
                ..GeneratorSpec::clicks(10)
            },
            GeneratorSpec::events(10).with_late_share(-0.1),
            GeneratorSpec::events(10).with_rate(0),
        ];
        for spec in bad {
            let err = GeneratorSource::new(spec.clone()).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{spec:?}: {err}");
        }

        let mut r = Registry::default();
        register(&mut r);
        let src = GeneratorSource::new(GeneratorSpec::clicks(100).with_splits(4)).unwrap();
        let back = r.source(KIND, &src.spec()).unwrap();
        assert_eq!(back.spec(), src.spec());
        assert_eq!(back.splits().unwrap().len(), 4);
        let minimal = r
            .source(
                KIND,
                &serde_json::json!({ "scenario": "events", "rows": 5 }),
            )
            .unwrap();
        assert_eq!(
            minimal.spec(),
            SourceFactory::spec(&GeneratorSource::new(GeneratorSpec::events(5)).unwrap())
        );
        assert!(r
            .source(
                KIND,
                &serde_json::json!({ "scenario": "events", "rowz": 5 })
            )
            .is_err());
    }
}
