//! Aggregates that take values out as well as in: what an OVER window's frame and a GROUP BY
//! over updates (`-U` / `-D` rows) keep per key. COUNT, SUM and AVG keep a count and a sum,
//! MIN and MAX a count per value; FIRST_VALUE, LAST_VALUE and LISTAGG (OVER frames only) the
//! values themselves in order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use arrow_array::Array;
use arrow_schema::DataType;

use crate::aggregates::{AggregateFn, Bound, State, Values};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Count,
    Sum(Num),
    Avg(Num),
    Min(Num),
    Max(Num),
    /// FIRST_VALUE, LAST_VALUE and LISTAGG keep the frame's values themselves (encoded; text
    /// for LISTAGG), in the frame's order.
    First,
    Last,
    List,
}

impl Kind {
    /// Whether the aggregate keeps the frame's values (see [`Held::kept`]).
    pub(crate) fn keeps(self) -> bool {
        matches!(self, Kind::First | Kind::Last | Kind::List)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Num {
    Int,
    Float,
    Dec,
}

impl Kind {
    pub(crate) fn of(b: &Bound) -> Kind {
        // The result type says what the column holds: AVG(BIGINT) is BIGINT, SUM(DECIMAL) and
        // AVG(DECIMAL) are DECIMAL, DOUBLE stays DOUBLE.
        let num = match b.output_field().data_type() {
            DataType::Float64 => Num::Float,
            DataType::Decimal128(..) => Num::Dec,
            _ => Num::Int,
        };
        match &b.aggregate().function {
            AggregateFn::Sum(_) => Kind::Sum(num),
            AggregateFn::Avg(_) => Kind::Avg(num),
            AggregateFn::Min(_) => Kind::Min(num),
            AggregateFn::Max(_) => Kind::Max(num),
            AggregateFn::FirstValue(_) => Kind::First,
            AggregateFn::LastValue(_) => Kind::Last,
            AggregateFn::ListAgg(..) => Kind::List,
            _ => Kind::Count,
        }
    }
}

/// A value as it is kept: integers and decimals as themselves, a DOUBLE as a key that sorts
/// as the number does (IEEE 754 total order).
pub(crate) type Value = i128;

pub(crate) fn float_key(v: f64) -> Value {
    let b = v.to_bits() as i64;
    (if b < 0 { b ^ i64::MAX } else { b }) as Value
}

pub(crate) fn key_float(k: Value) -> f64 {
    let b = k as i64;
    f64::from_bits((if b < 0 { b ^ i64::MAX } else { b }) as u64)
}

/// Row `i` of `v` as kept (`None`: NULL, which aggregates skip; COUNT(*) reads 0).
pub(crate) fn value_of(v: &Values, i: usize) -> Option<Value> {
    match v {
        Values::None => Some(0),
        Values::Nulls(n) => (!n.as_ref().is_some_and(|n| n.is_null(i))).then_some(0),
        Values::Int(a) => (!a.is_null(i)).then(|| a.value(i) as Value),
        Values::Float(a) => (!a.is_null(i)).then(|| float_key(a.value(i))),
        Values::Dec(a, _) => (!a.is_null(i)).then(|| a.value(i)),
        _ => None,
    }
}

/// Row `i` of `v` as FIRST_VALUE and LAST_VALUE (encoded) or LISTAGG (text) keep it; `None`
/// for NULL and for the other aggregates' values.
pub(crate) fn kept_of(v: &Values, i: usize) -> Option<Box<[u8]>> {
    match v {
        Values::Rows(rows, nulls) => {
            (!nulls.as_ref().is_some_and(|n| n.is_null(i))).then(|| rows.row(i).as_ref().into())
        }
        Values::Text(a, _) => (!a.is_null(i)).then(|| a.value(i).as_bytes().into()),
        _ => None,
    }
}

/// The running aggregate of a frame: values go in as rows enter and out as they leave.
#[derive(Debug, Clone, Default)]
pub(crate) struct Acc {
    /// Non-NULL values in the frame.
    pub(crate) n: i64,
    /// SUM and AVG over BIGINT (wrapping, as Flink's) and DECIMAL.
    pub(crate) int: i128,
    pub(crate) float: f64,
    /// MIN and MAX: how many of each value the frame holds.
    pub(crate) values: BTreeMap<Value, u32>,
    /// FIRST_VALUE, LAST_VALUE and LISTAGG: the frame's values that are not NULL, oldest
    /// first (rows leave a frame oldest first, so a leaving row's value is the front).
    pub(crate) kept: VecDeque<Box<[u8]>>,
    /// The bytes of `kept`.
    pub(crate) kept_bytes: usize,
}

impl Acc {
    pub(crate) fn add(&mut self, kind: Kind, v: Value) {
        self.n += 1;
        match kind {
            Kind::Count => {}
            Kind::Sum(Num::Int) | Kind::Avg(Num::Int) => {
                self.int = (self.int as i64).wrapping_add(v as i64) as i128
            }
            Kind::Sum(Num::Dec) | Kind::Avg(Num::Dec) => self.int = self.int.wrapping_add(v),
            Kind::Sum(Num::Float) | Kind::Avg(Num::Float) => self.float += key_float(v),
            Kind::Min(_) | Kind::Max(_) => *self.values.entry(v).or_default() += 1,
            Kind::First | Kind::Last | Kind::List => {}
        }
    }

    /// A kept value enters the frame (see [`Kind::keeps`]).
    pub(crate) fn add_kept(&mut self, v: Box<[u8]>) {
        self.kept_bytes += v.len();
        self.kept.push_back(v);
    }

    /// The oldest kept value leaves the frame.
    pub(crate) fn retract_kept(&mut self) {
        if let Some(v) = self.kept.pop_front() {
            self.kept_bytes -= v.len();
        }
    }

    pub(crate) fn retract(&mut self, kind: Kind, v: Value) {
        self.n -= 1;
        match kind {
            Kind::Count => {}
            Kind::Sum(Num::Int) | Kind::Avg(Num::Int) => {
                self.int = (self.int as i64).wrapping_sub(v as i64) as i128
            }
            Kind::Sum(Num::Dec) | Kind::Avg(Num::Dec) => self.int = self.int.wrapping_sub(v),
            Kind::Sum(Num::Float) | Kind::Avg(Num::Float) => {
                // An empty frame starts again from zero, not from rounding leftovers.
                self.float = if self.n == 0 {
                    0.0
                } else {
                    self.float - key_float(v)
                }
            }
            Kind::Min(_) | Kind::Max(_) => {
                if let Some(c) = self.values.get_mut(&v) {
                    *c -= 1;
                    if *c == 0 {
                        self.values.remove(&v);
                    }
                }
            }
            Kind::First | Kind::Last | Kind::List => {}
        }
    }

    /// Keeps only the extreme value of MIN / MAX, the first or last of FIRST_VALUE /
    /// LAST_VALUE (rows never leave an unbounded frame).
    pub(crate) fn prune(&mut self, kind: Kind) {
        match kind {
            Kind::First => self.kept.truncate(1),
            Kind::Last => {
                let n = self.kept.len();
                self.kept.drain(..n.saturating_sub(1));
            }
            _ => {}
        }
        self.kept_bytes = self.kept.iter().map(|v| v.len()).sum();
        let keep = match kind {
            Kind::Min(_) => self.values.keys().next().copied(),
            Kind::Max(_) => self.values.keys().next_back().copied(),
            _ => return,
        };
        if self.values.len() > 1 {
            if let Some(v) = keep {
                self.values = BTreeMap::from([(v, 1)]);
            }
        }
    }

    /// The running aggregate of an unbounded frame (at most one MIN / MAX value), as bytes;
    /// FIRST_VALUE and LAST_VALUE add their one value (a length, then its bytes).
    pub(crate) fn encode(&self, kind: Kind, out: &mut Vec<u8>) {
        out.extend(self.n.to_le_bytes());
        out.extend(self.int.to_le_bytes());
        out.extend(self.float.to_bits().to_le_bytes());
        let v = self.values.keys().next();
        out.push(v.is_some() as u8);
        out.extend(v.copied().unwrap_or(0).to_le_bytes());
        if kind.keeps() {
            match self.kept.front() {
                Some(v) => {
                    out.push(1);
                    out.extend((v.len() as u32).to_le_bytes());
                    out.extend_from_slice(v);
                }
                None => out.push(0),
            }
        }
    }

    pub(crate) const ENCODED_BYTES: usize = 8 + 16 + 8 + 1 + 16;

    /// Reads what [`Acc::encode`] wrote from the front of `b`, and how many bytes it took;
    /// `None` when `b` is too short.
    pub(crate) fn decode(kind: Kind, b: &[u8]) -> Option<(Acc, usize)> {
        let fixed = b.get(..Self::ENCODED_BYTES)?;
        let n = i64::from_le_bytes(fixed[0..8].try_into().ok()?);
        let int = i128::from_le_bytes(fixed[8..24].try_into().ok()?);
        let float = f64::from_bits(u64::from_le_bytes(fixed[24..32].try_into().ok()?));
        let v = i128::from_le_bytes(fixed[33..49].try_into().ok()?);
        let mut used = Self::ENCODED_BYTES;
        let mut kept: VecDeque<Box<[u8]>> = VecDeque::new();
        if kind.keeps() {
            if *b.get(used)? == 1 {
                let len = u32::from_le_bytes(b.get(used + 1..used + 5)?.try_into().ok()?);
                let start = used + 5;
                kept.push_back(b.get(start..start + len as usize)?.into());
                used = start + len as usize;
            } else {
                used += 1;
            }
        }
        let acc = Acc {
            n,
            int,
            float,
            values: if fixed[32] == 1 {
                BTreeMap::from([(v, 1)])
            } else {
                BTreeMap::new()
            },
            kept_bytes: kept.iter().map(|v| v.len()).sum(),
            kept,
        };
        Some((acc, used))
    }

    /// The frame's aggregate as the state `aggregates::finish` turns into a result.
    pub(crate) fn state(&self, kind: Kind) -> State {
        let some = self.n > 0;
        let first = self.values.keys().next().copied();
        let last = self.values.keys().next_back().copied();
        match kind {
            Kind::Count => State::Count(self.n),
            Kind::Sum(Num::Int) => State::SumInt(some.then_some(self.int as i64)),
            Kind::Sum(Num::Dec) => State::SumDec(some.then_some(self.int)),
            Kind::Sum(Num::Float) => State::SumFloat(some.then_some(self.float)),
            Kind::Avg(Num::Int) => State::AvgInt(self.int as i64, self.n),
            Kind::Avg(Num::Dec) => State::AvgDec(self.int, self.n),
            Kind::Avg(Num::Float) => State::Avg(self.float, self.n),
            Kind::Min(Num::Int) => State::MinInt(first.map(|v| v as i64)),
            Kind::Min(Num::Dec) => State::MinDec(first),
            Kind::Min(Num::Float) => State::MinFloat(first.map(key_float)),
            Kind::Max(Num::Int) => State::MaxInt(last.map(|v| v as i64)),
            Kind::Max(Num::Dec) => State::MaxDec(last),
            Kind::Max(Num::Float) => State::MaxFloat(last.map(key_float)),
            Kind::First => State::First(self.kept.front().cloned()),
            Kind::Last => State::Last(self.kept.back().cloned()),
            Kind::List => unreachable!("LISTAGG's state is made by `Acc::list`"),
        }
    }

    /// LISTAGG's state: the frame's texts joined by `separator`.
    pub(crate) fn list(&self, separator: &Arc<str>) -> State {
        let mut text: Option<String> = None;
        for v in &self.kept {
            let v = String::from_utf8_lossy(v);
            match &mut text {
                Some(t) => {
                    t.push_str(separator);
                    t.push_str(&v);
                }
                None => text = Some(v.into_owned()),
            }
        }
        State::Text(text, separator.clone())
    }
}

impl Acc {
    /// Everything the accumulator holds for a GROUP BY over updates, as bytes: the count, the
    /// sums, and every MIN / MAX value with its count (values may leave again, so all stay).
    pub(crate) fn encode_all(&self, out: &mut Vec<u8>) {
        out.extend(self.n.to_le_bytes());
        out.extend(self.int.to_le_bytes());
        out.extend(self.float.to_bits().to_le_bytes());
        out.extend((self.values.len() as u32).to_le_bytes());
        for (v, c) in &self.values {
            out.extend(v.to_le_bytes());
            out.extend(c.to_le_bytes());
        }
    }

    /// Reads what [`Acc::encode_all`] wrote from the front of `b`, and how many bytes it
    /// took; `None` when `b` is too short.
    pub(crate) fn decode_all(b: &[u8]) -> Option<(Acc, usize)> {
        let n = i64::from_le_bytes(b.get(0..8)?.try_into().ok()?);
        let int = i128::from_le_bytes(b.get(8..24)?.try_into().ok()?);
        let float = f64::from_bits(u64::from_le_bytes(b.get(24..32)?.try_into().ok()?));
        let len = u32::from_le_bytes(b.get(32..36)?.try_into().ok()?) as usize;
        let mut values = BTreeMap::new();
        let mut at = 36;
        for _ in 0..len {
            let v = i128::from_le_bytes(b.get(at..at + 16)?.try_into().ok()?);
            let c = u32::from_le_bytes(b.get(at + 16..at + 20)?.try_into().ok()?);
            values.insert(v, c);
            at += 20;
        }
        let acc = Acc {
            n,
            int,
            float,
            values,
            ..Acc::default()
        };
        Some((acc, at))
    }

    /// Heap bytes of MIN / MAX's values, roughly.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.values.len() * 48 + self.kept_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_keys_sort_as_the_numbers_and_read_back() {
        let xs = [-1e300, -2.5, -0.0, 0.0, 1.0, 3.25, f64::INFINITY];
        let keys: Vec<Value> = xs.iter().map(|&x| float_key(x)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        for x in xs {
            assert_eq!(key_float(float_key(x)).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn a_whole_accumulator_reads_back_with_every_value() {
        let mut a = Acc::default();
        for v in [5, 3, 5, 9] {
            a.add(Kind::Max(Num::Int), v);
        }
        a.retract(Kind::Max(Num::Int), 9);
        let mut b = Vec::new();
        a.encode_all(&mut b);
        b.push(7);
        let (back, used) = Acc::decode_all(&b).expect("decodes");
        assert_eq!(used, b.len() - 1);
        assert_eq!((back.n, back.int), (a.n, a.int));
        assert_eq!(back.values, BTreeMap::from([(3, 1), (5, 2)]));
        assert!(Acc::decode_all(&b[..used - 1]).is_none());
    }
}
