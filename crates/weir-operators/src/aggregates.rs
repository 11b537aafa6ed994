//! Aggregate functions for keyed and windowed aggregation.
//!
//! Every aggregate has a state, an update with one input value, and a result. The
//! **combinable** ones (count, sum, min, max, avg, approximate count distinct) also have a
//! partial form that travels between operators as Arrow columns and merges exactly, which is
//! what two-phase (local pre-aggregation) and salted aggregation need. An exact median is not
//! combinable: merging two medians does not give the median, so it is refused for two-phase and
//! salted plans (see [`Aggregate::combinable`]). Its state keeps every value, unsorted: merging
//! two moves the smaller list into the larger, and the median is selected (not sorted for) when
//! the result is built, so a group of n values costs O(n log n) however its sessions merge.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Decimal128Builder, Float64Builder, Int64Builder, ListBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::keys::hash_key;
use weir_runtime::{Error, Result};

/// An aggregate function and the column it reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "fn", content = "column")]
pub enum AggregateFn {
    /// Rows (COUNT(*)).
    Count,
    /// Rows whose column is not NULL (COUNT(x)); combinable like COUNT(*).
    CountValues(String),
    Sum(String),
    Min(String),
    Max(String),
    Avg(String),
    /// HyperLogLog estimate of the distinct values (2^12 registers, about 1.6 % error).
    ApproxCountDistinct(String),
    /// The exact median (not combinable).
    Median(String),
    /// The exact number of distinct values (COUNT(DISTINCT x)); keeps every distinct value, so
    /// it is taken in windows, one phase.
    CountDistinct(String),
    /// The sum of squared differences from the mean (M2), by Welford's online algorithm over
    /// the values as DOUBLE, as Flink's `WELFORD_M2` (what its VAR_POP, VAR_SAMP, STDDEV_POP and
    /// STDDEV_SAMP divide); combinable.
    WelfordM2(String),
    /// The first value that is not NULL, in the order rows come (Flink's FIRST_VALUE, of any
    /// type); partial states merge keeping the earlier one's.
    FirstValue(String),
    /// The last value that is not NULL, in the order rows come (Flink's LAST_VALUE).
    LastValue(String),
    /// The values that are not NULL, as text joined by the separator (the second), in the
    /// order rows come (Flink's LISTAGG of a STRING).
    ListAgg(String, String),
    /// The distinct values that are not NULL, joined by the separator (the second) in the
    /// order each first comes (Flink's `LISTAGG(DISTINCT x)`).
    ListAggDistinct(String, String),
}

/// An aggregate with the name of its output column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregate {
    pub function: AggregateFn,
    pub output: String,
}

/// `COUNT(*) AS output`.
pub fn count(output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::Count,
        output: output.into(),
    }
}
/// `COUNT(column) AS output`: the rows where `column` is not NULL.
pub fn count_values(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::CountValues(column.into()),
        output: output.into(),
    }
}
pub fn sum(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::Sum(column.into()),
        output: output.into(),
    }
}
pub fn min(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::Min(column.into()),
        output: output.into(),
    }
}
pub fn max(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::Max(column.into()),
        output: output.into(),
    }
}
pub fn avg(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::Avg(column.into()),
        output: output.into(),
    }
}
pub fn approx_count_distinct(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::ApproxCountDistinct(column.into()),
        output: output.into(),
    }
}
pub fn count_distinct(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::CountDistinct(column.into()),
        output: output.into(),
    }
}
/// `FIRST_VALUE(column) AS output` (see [`AggregateFn::FirstValue`]).
pub fn first_value(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::FirstValue(column.into()),
        output: output.into(),
    }
}
/// `LAST_VALUE(column) AS output` (see [`AggregateFn::LastValue`]).
pub fn last_value(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::LastValue(column.into()),
        output: output.into(),
    }
}
/// `LISTAGG(column, separator) AS output` (see [`AggregateFn::ListAgg`]).
pub fn list_agg(column: &str, separator: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::ListAgg(column.into(), separator.into()),
        output: output.into(),
    }
}
/// `LISTAGG(DISTINCT column, separator) AS output` (see [`AggregateFn::ListAggDistinct`]).
pub fn list_agg_distinct(column: &str, separator: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::ListAggDistinct(column.into(), separator.into()),
        output: output.into(),
    }
}
/// Welford's M2 of `column` (see [`AggregateFn::WelfordM2`]).
pub fn welford_m2(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::WelfordM2(column.into()),
        output: output.into(),
    }
}
pub fn median(column: &str, output: &str) -> Aggregate {
    Aggregate {
        function: AggregateFn::Median(column.into()),
        output: output.into(),
    }
}

impl AggregateFn {
    /// Whether the result depends on the order rows come in (FIRST_VALUE, LAST_VALUE, LISTAGG).
    pub fn in_arrival_order(&self) -> bool {
        matches!(
            self,
            AggregateFn::FirstValue(_)
                | AggregateFn::LastValue(_)
                | AggregateFn::ListAgg(..)
                | AggregateFn::ListAggDistinct(..)
        )
    }
}

/// What of `aggregates` takes rows in the order they arrive (FIRST_VALUE, LAST_VALUE,
/// LISTAGG), for [`OperatorFactory::arrival_order`](weir_runtime::OperatorFactory::arrival_order).
pub fn arrival_order(aggregates: &[Aggregate]) -> Option<String> {
    let outputs: Vec<String> = (aggregates.iter())
        .filter(|a| a.function.in_arrival_order())
        .map(|a| format!("`{}`", a.output))
        .collect();
    (!outputs.is_empty()).then(|| {
        format!(
            "{} (FIRST_VALUE, LAST_VALUE or LISTAGG) take rows in the order they arrive",
            outputs.join(", ")
        )
    })
}

impl Aggregate {
    /// Whether partial states of this aggregate merge exactly; `Err` says why not.
    pub fn combinable(&self) -> std::result::Result<(), String> {
        match &self.function {
            f if f.in_arrival_order() => Err(format!(
                "`{}` takes rows in the order they come, which partial states from several \
                 subtasks do not keep, so it cannot be pre-aggregated or salted; use a one-phase \
                 aggregation",
                self.output
            )),
            AggregateFn::Median(c) => Err(format!(
                "`{}` (median of {c}) is not combinable: the median of partial medians is not the \
                 median, so it cannot be pre-aggregated or salted; use a one-phase aggregation",
                self.output
            )),
            AggregateFn::CountDistinct(c) => Err(format!(
                "`{}` (exact distinct count of {c}) keeps its values in one place; use a one-phase \
                 aggregation, or APPROX_COUNT_DISTINCT, which merges",
                self.output
            )),
            _ => Ok(()),
        }
    }

    pub fn column(&self) -> Option<&str> {
        match &self.function {
            AggregateFn::Count => None,
            AggregateFn::CountValues(c)
            | AggregateFn::Sum(c)
            | AggregateFn::Min(c)
            | AggregateFn::Max(c)
            | AggregateFn::Avg(c)
            | AggregateFn::ApproxCountDistinct(c)
            | AggregateFn::Median(c)
            | AggregateFn::CountDistinct(c)
            | AggregateFn::WelfordM2(c)
            | AggregateFn::FirstValue(c)
            | AggregateFn::LastValue(c)
            | AggregateFn::ListAgg(c, _)
            | AggregateFn::ListAggDistinct(c, _) => Some(c),
        }
    }

    fn describe(&self) -> String {
        let f = match &self.function {
            AggregateFn::Count => "count(*)".to_string(),
            AggregateFn::CountValues(c) => format!("count({c})"),
            AggregateFn::Sum(c) => format!("sum({c})"),
            AggregateFn::Min(c) => format!("min({c})"),
            AggregateFn::Max(c) => format!("max({c})"),
            AggregateFn::Avg(c) => format!("avg({c})"),
            AggregateFn::ApproxCountDistinct(c) => format!("approx_count_distinct({c})"),
            AggregateFn::Median(c) => format!("median({c})"),
            AggregateFn::CountDistinct(c) => format!("count(distinct {c})"),
            AggregateFn::WelfordM2(c) => format!("welford_m2({c})"),
            AggregateFn::FirstValue(c) => format!("first_value({c})"),
            AggregateFn::LastValue(c) => format!("last_value({c})"),
            AggregateFn::ListAgg(c, sep) => format!("listagg({c}, '{sep}')"),
            AggregateFn::ListAggDistinct(c, sep) => format!("listagg(distinct {c}, '{sep}')"),
        };
        format!("{f} AS {}", self.output)
    }
}

/// Describes a list of aggregates for plans.
pub fn describe(aggs: &[Aggregate]) -> String {
    aggs.iter()
        .map(Aggregate::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether values are integers or floats (the numeric types aggregates read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Int,
    Float,
    /// DECIMAL(precision, scale), as Arrow's Decimal128.
    Decimal(u8, i8),
}

/// The scale of AVG over DECIMAL(p, s): DECIMAL(38, max(6, s)), as Flink.
fn avg_scale(s: i8) -> i8 {
    s.max(6)
}

/// An aggregate bound to an input schema: where its column is and what it produces.
#[derive(Debug)]
pub(crate) struct Bound {
    agg: Aggregate,
    column: Option<usize>,
    num: Num,
    /// Encodes the column for distinct counting, FIRST_VALUE and LAST_VALUE (any type).
    rows: Option<RowConverter>,
    /// The column's type (what FIRST_VALUE and LAST_VALUE give back).
    value_type: DataType,
    /// A NULL of the column, encoded: FIRST_VALUE and LAST_VALUE of no value.
    null_row: Option<Box<[u8]>>,
}

const HLL_BITS: u32 = 12;
const HLL_REGISTERS: usize = 1 << HLL_BITS;

/// The state of one aggregate for one group.
#[derive(Debug, Clone)]
pub(crate) enum State {
    Count(i64),
    SumInt(Option<i64>),
    SumFloat(Option<f64>),
    SumDec(Option<i128>),
    MinInt(Option<i64>),
    MinDec(Option<i128>),
    MaxDec(Option<i128>),
    MinFloat(Option<f64>),
    MaxInt(Option<i64>),
    MaxFloat(Option<f64>),
    Avg(f64, i64),
    /// AVG over BIGINT: the sum (wrapping, as Flink's BIGINT sum) and the count; the result
    /// is the sum divided by the count, truncated, a BIGINT as in Flink.
    AvgInt(i64, i64),
    /// AVG over DECIMAL(p, s): the unscaled sum and the count.
    AvgDec(i128, i64),
    Hll(Box<[u8; HLL_REGISTERS]>),
    /// Every value, in no order.
    Median(Vec<f64>),
    /// Every distinct value, encoded (Arrow's row format).
    Distinct(hashbrown::HashSet<Box<[u8]>>),
    /// Welford's count, mean and M2 (see [`AggregateFn::WelfordM2`]).
    Welford {
        n: i64,
        mean: f64,
        m2: f64,
    },
    /// FIRST_VALUE's value so far, encoded (Arrow's row format).
    First(Option<Box<[u8]>>),
    /// LAST_VALUE's value so far, encoded.
    Last(Option<Box<[u8]>>),
    /// LISTAGG's text so far, and its separator.
    Text(Option<String>, Arc<str>),
    /// LISTAGG(DISTINCT)'s values so far, each with its place in the order they first came,
    /// and the separator.
    Texts(hashbrown::HashMap<Box<str>, u32>, Arc<str>),
}

/// One input column, read once per batch.
pub(crate) enum Values<'a> {
    None,
    Int(&'a arrow_array::Int64Array),
    Float(&'a arrow_array::Float64Array),
    /// A DECIMAL column and its scale.
    Dec(&'a arrow_array::Decimal128Array, i8),
    Hashes(Vec<u64>, Option<arrow_buffer::NullBuffer>),
    /// Which rows are NULL (COUNT(x) reads nothing else).
    Nulls(Option<arrow_buffer::NullBuffer>),
    /// The values encoded, for exact distinct counts, FIRST_VALUE and LAST_VALUE.
    Rows(arrow_row::Rows, Option<arrow_buffer::NullBuffer>),
    /// Text, for LISTAGG, and its separator.
    Text(&'a arrow_array::StringArray, Arc<str>),
}

impl Bound {
    /// Binds `agg` to `schema` for raw input rows.
    ///
    /// # Errors
    /// `Plan` for a missing column (naming those that exist) or a type the aggregate cannot
    /// read (with the cast to use).
    pub(crate) fn new(agg: &Aggregate, schema: &arrow_schema::SchemaRef) -> Result<Bound> {
        let mut value_type = DataType::Null;
        let (column, num, rows) = match agg.column() {
            None => (None, Num::Int, None),
            Some(c) => {
                let i = schema.index_of(c).map_err(|_| {
                    Error::plan(format!(
                        "aggregate `{}`: column `{c}` not found; the stream has columns: {}",
                        agg.output,
                        weir_core::keys::column_names(schema)
                    ))
                })?;
                let t = schema.field(i).data_type();
                value_type = t.clone();
                if let AggregateFn::ListAgg(..) | AggregateFn::ListAggDistinct(..) = agg.function {
                    if t != &DataType::Utf8 {
                        return Err(Error::plan(format!(
                            "aggregate `{}`: LISTAGG takes text, and `{c}` is {t}; cast it to \
                             STRING first",
                            agg.output
                        )));
                    }
                    (Some(i), Num::Int, None)
                } else if let AggregateFn::FirstValue(_) | AggregateFn::LastValue(_) = agg.function
                {
                    (
                        Some(i),
                        Num::Int,
                        Some(RowConverter::new(vec![SortField::new(t.clone())])?),
                    )
                } else if let AggregateFn::CountValues(_) = agg.function {
                    (Some(i), Num::Int, None)
                } else if let AggregateFn::ApproxCountDistinct(_) | AggregateFn::CountDistinct(_) =
                    agg.function
                {
                    (
                        Some(i),
                        Num::Int,
                        Some(RowConverter::new(vec![SortField::new(t.clone())])?),
                    )
                } else {
                    let num = match t {
                        DataType::Int64 => Num::Int,
                        DataType::Float64 => Num::Float,
                        DataType::Decimal128(p, s) => Num::Decimal(*p, *s),
                        other => {
                            return Err(Error::plan(format!(
                                "aggregate `{}` reads `{c}` of type {other}; it takes BIGINT, \
                                 DOUBLE or DECIMAL: cast the column first",
                                agg.output
                            )))
                        }
                    };
                    (Some(i), num, None)
                }
            }
        };
        let null_row = match (&agg.function, &rows) {
            (AggregateFn::FirstValue(_) | AggregateFn::LastValue(_), Some(conv)) => {
                let null = arrow_array::new_null_array(&value_type, 1);
                let rows = conv.convert_columns(&[null])?;
                Some(rows.row(0).as_ref().into())
            }
            _ => None,
        };
        Ok(Bound {
            agg: agg.clone(),
            column,
            num,
            rows,
            value_type,
            null_row,
        })
    }

    /// The aggregate this binds.
    pub(crate) fn aggregate(&self) -> &Aggregate {
        &self.agg
    }

    /// The type of the result.
    pub(crate) fn output_field(&self) -> Field {
        // Flink's result types: SUM(DECIMAL(p, s)) is DECIMAL(38, s), AVG(DECIMAL(p, s)) is
        // DECIMAL(38, max(6, s)), AVG(BIGINT) is BIGINT.
        let t = match (&self.agg.function, self.num) {
            (
                AggregateFn::Count
                | AggregateFn::CountValues(_)
                | AggregateFn::ApproxCountDistinct(_)
                | AggregateFn::CountDistinct(_),
                _,
            ) => DataType::Int64,
            (AggregateFn::Median(_) | AggregateFn::WelfordM2(_), _) => DataType::Float64,
            (AggregateFn::FirstValue(_) | AggregateFn::LastValue(_), _) => self.value_type.clone(),
            (AggregateFn::ListAgg(..) | AggregateFn::ListAggDistinct(..), _) => DataType::Utf8,
            (AggregateFn::Avg(_), Num::Decimal(_, s)) => DataType::Decimal128(38, avg_scale(s)),
            (AggregateFn::Sum(_), Num::Decimal(_, s)) => DataType::Decimal128(38, s),
            (_, Num::Decimal(p, s)) => DataType::Decimal128(p, s),
            (_, Num::Int) => DataType::Int64,
            (_, Num::Float) => DataType::Float64,
        };
        Field::new(&self.agg.output, t, true)
    }

    /// The partial columns of this aggregate (two for avg).
    pub(crate) fn partial_fields(&self) -> Vec<Field> {
        let name = |suffix: &str| format!("{}__{suffix}", self.agg.output);
        match &self.agg.function {
            AggregateFn::Avg(_) => vec![
                Field::new(
                    name("sum"),
                    match self.num {
                        Num::Int => DataType::Int64,
                        Num::Float => DataType::Float64,
                        Num::Decimal(_, s) => DataType::Decimal128(38, s),
                    },
                    false,
                ),
                Field::new(name("count"), DataType::Int64, false),
            ],
            AggregateFn::ApproxCountDistinct(_) => {
                vec![Field::new(name("hll"), DataType::Binary, false)]
            }
            // The value in its own type: a restore over a column of another type is refused
            // by the state's type check, never decoded as the wrong bytes.
            AggregateFn::FirstValue(_) | AggregateFn::LastValue(_) => {
                vec![Field::new(name("value"), self.value_type.clone(), true)]
            }
            AggregateFn::WelfordM2(_) => vec![
                Field::new(name("n"), DataType::Int64, false),
                Field::new(name("mean"), DataType::Float64, false),
                Field::new(name("m2"), DataType::Float64, false),
            ],
            _ => {
                let mut f = self.output_field();
                f = f.with_name(name("partial"));
                vec![f]
            }
        }
    }

    pub(crate) fn init(&self) -> State {
        match (&self.agg.function, self.num) {
            (AggregateFn::Count | AggregateFn::CountValues(_), _) => State::Count(0),
            (AggregateFn::Sum(_), Num::Int) => State::SumInt(None),
            (AggregateFn::Sum(_), Num::Float) => State::SumFloat(None),
            (AggregateFn::Sum(_), Num::Decimal(..)) => State::SumDec(None),
            (AggregateFn::Min(_), Num::Int) => State::MinInt(None),
            (AggregateFn::Min(_), Num::Float) => State::MinFloat(None),
            (AggregateFn::Min(_), Num::Decimal(..)) => State::MinDec(None),
            (AggregateFn::Max(_), Num::Int) => State::MaxInt(None),
            (AggregateFn::Max(_), Num::Float) => State::MaxFloat(None),
            (AggregateFn::Max(_), Num::Decimal(..)) => State::MaxDec(None),
            (AggregateFn::Avg(_), Num::Int) => State::AvgInt(0, 0),
            (AggregateFn::Avg(_), Num::Float) => State::Avg(0.0, 0),
            (AggregateFn::Avg(_), Num::Decimal(..)) => State::AvgDec(0, 0),
            (AggregateFn::ApproxCountDistinct(_), _) => State::Hll(Box::new([0; HLL_REGISTERS])),
            (AggregateFn::Median(_), _) => State::Median(Vec::new()),
            (AggregateFn::CountDistinct(_), _) => State::Distinct(Default::default()),
            (AggregateFn::WelfordM2(_), _) => State::Welford {
                n: 0,
                mean: 0.0,
                m2: 0.0,
            },
            (AggregateFn::FirstValue(_), _) => State::First(None),
            (AggregateFn::LastValue(_), _) => State::Last(None),
            (AggregateFn::ListAgg(_, sep), _) => State::Text(None, sep.as_str().into()),
            (AggregateFn::ListAggDistinct(_, sep), _) => {
                State::Texts(Default::default(), sep.as_str().into())
            }
        }
    }

    /// Reads a state [`State::encode`] wrote for this aggregate from the front of `r`.
    #[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
    pub(crate) fn decode_state(&self, r: &mut weir_state::bytes::Reader) -> Result<State> {
        fn opt<const N: usize>(r: &mut weir_state::bytes::Reader) -> Result<Option<[u8; N]>> {
            Ok(match r.u8()? {
                0 => None,
                _ => Some(r.array()?),
            })
        }
        fn opt_bytes<'a>(r: &mut weir_state::bytes::Reader<'a>) -> Result<Option<&'a [u8]>> {
            Ok(match r.u8()? {
                0 => None,
                _ => Some(r.bytes()?),
            })
        }
        Ok(match self.init() {
            State::Count(_) => State::Count(r.i64()?),
            State::SumInt(_) => State::SumInt(opt(r)?.map(i64::from_le_bytes)),
            State::MinInt(_) => State::MinInt(opt(r)?.map(i64::from_le_bytes)),
            State::MaxInt(_) => State::MaxInt(opt(r)?.map(i64::from_le_bytes)),
            State::SumFloat(_) => State::SumFloat(opt(r)?.map(f64::from_le_bytes)),
            State::MinFloat(_) => State::MinFloat(opt(r)?.map(f64::from_le_bytes)),
            State::MaxFloat(_) => State::MaxFloat(opt(r)?.map(f64::from_le_bytes)),
            State::SumDec(_) => State::SumDec(opt(r)?.map(i128::from_le_bytes)),
            State::MinDec(_) => State::MinDec(opt(r)?.map(i128::from_le_bytes)),
            State::MaxDec(_) => State::MaxDec(opt(r)?.map(i128::from_le_bytes)),
            State::Avg(..) => State::Avg(r.f64()?, r.i64()?),
            State::AvgInt(..) => State::AvgInt(r.i64()?, r.i64()?),
            State::AvgDec(..) => State::AvgDec(i128::from_le_bytes(r.array()?), r.i64()?),
            State::Hll(mut registers) => {
                registers.copy_from_slice(r.take(HLL_REGISTERS)?);
                State::Hll(registers)
            }
            State::Median(_) => {
                let n = r.u32()?;
                State::Median(
                    (0..n)
                        .map(|_| r.f64())
                        .collect::<std::result::Result<_, _>>()?,
                )
            }
            State::Distinct(_) => {
                let n = r.u32()?;
                State::Distinct(
                    (0..n)
                        .map(|_| r.bytes().map(Box::from))
                        .collect::<std::result::Result<_, _>>()?,
                )
            }
            State::Welford { .. } => State::Welford {
                n: r.i64()?,
                mean: r.f64()?,
                m2: r.f64()?,
            },
            State::First(_) => State::First(opt_bytes(r)?.map(Box::from)),
            State::Last(_) => State::Last(opt_bytes(r)?.map(Box::from)),
            State::Text(_, separator) => {
                let text = match opt_bytes(r)? {
                    Some(b) => Some(String::from_utf8(b.to_vec()).map_err(|e| {
                        Error::Internal(format!("LISTAGG's state on disk is not text: {e}"))
                    })?),
                    None => None,
                };
                State::Text(text, separator)
            }
            State::Texts(_, separator) => {
                let n = r.u32()?;
                let mut values = hashbrown::HashMap::with_capacity(n as usize);
                for place in 0..n {
                    let v = std::str::from_utf8(r.bytes()?).map_err(|e| {
                        Error::Internal(format!("LISTAGG's state on disk is not text: {e}"))
                    })?;
                    values.insert(v.into(), place);
                }
                State::Texts(values, separator)
            }
        })
    }

    /// Reads this aggregate's input column of a batch.
    pub(crate) fn values<'a>(&self, batch: &'a RecordBatch) -> Result<Values<'a>> {
        let Some(i) = self.column else {
            return Ok(Values::None);
        };
        let col = batch.column(i);
        if let AggregateFn::CountValues(_) = self.agg.function {
            return Ok(Values::Nulls(col.logical_nulls()));
        }
        if let AggregateFn::ListAgg(_, separator) | AggregateFn::ListAggDistinct(_, separator) =
            &self.agg.function
        {
            return Ok(Values::Text(
                col.as_string::<i32>(),
                separator.as_str().into(),
            ));
        }
        if let Some(conv) = &self.rows {
            let rows = conv.convert_columns(std::slice::from_ref(col))?;
            if let AggregateFn::CountDistinct(_)
            | AggregateFn::FirstValue(_)
            | AggregateFn::LastValue(_) = self.agg.function
            {
                return Ok(Values::Rows(rows, col.logical_nulls()));
            }
            let hashes = rows.iter().map(|r| hash_key(r.as_ref())).collect();
            return Ok(Values::Hashes(hashes, col.nulls().cloned()));
        }
        Ok(match self.num {
            Num::Int => Values::Int(col.as_primitive::<Int64Type>()),
            Num::Float => Values::Float(col.as_primitive::<Float64Type>()),
            Num::Decimal(_, s) => Values::Dec(col.as_primitive::<Decimal128Type>(), s),
        })
    }
}

impl State {
    /// Adds row `i` of `values` (NULLs are skipped, as SQL does).
    pub(crate) fn update(&mut self, values: &Values, i: usize) {
        match (self, values) {
            (State::Count(n), Values::Nulls(nulls))
                if !nulls.as_ref().is_some_and(|b| b.is_null(i)) =>
            {
                *n += 1
            }
            (State::Count(_), Values::Nulls(_)) => {}
            (State::Count(n), _) => *n += 1,
            (s, Values::Int(a)) => {
                if a.is_null(i) {
                    return;
                }
                let v = a.value(i);
                match s {
                    State::SumInt(x) => *x = Some(x.unwrap_or(0).wrapping_add(v)),
                    State::MinInt(x) => *x = Some(x.map_or(v, |m| m.min(v))),
                    State::MaxInt(x) => *x = Some(x.map_or(v, |m| m.max(v))),
                    State::AvgInt(s, n) => {
                        *s = s.wrapping_add(v);
                        *n += 1;
                    }
                    State::Median(vs) => vs.push(v as f64),
                    State::Welford { n, mean, m2 } => welford_add(n, mean, m2, v as f64),
                    _ => {}
                }
            }
            (s, Values::Dec(a, scale)) => {
                if a.is_null(i) {
                    return;
                }
                let v = a.value(i);
                match s {
                    State::SumDec(x) => *x = Some(x.unwrap_or(0).wrapping_add(v)),
                    State::MinDec(x) => *x = Some(x.map_or(v, |m| m.min(v))),
                    State::MaxDec(x) => *x = Some(x.map_or(v, |m| m.max(v))),
                    State::AvgDec(s, n) => {
                        *s = s.wrapping_add(v);
                        *n += 1;
                    }
                    State::Median(vs) => vs.push(v as f64 / 10f64.powi(*scale as i32)),
                    State::Welford { n, mean, m2 } => {
                        welford_add(n, mean, m2, decimal_to_f64(v, *scale))
                    }
                    _ => {}
                }
            }
            (s, Values::Float(a)) => {
                if a.is_null(i) {
                    return;
                }
                let v = a.value(i);
                match s {
                    State::SumFloat(x) => *x = Some(x.unwrap_or(0.0) + v),
                    State::MinFloat(x) => *x = Some(x.map_or(v, |m| m.min(v))),
                    State::MaxFloat(x) => *x = Some(x.map_or(v, |m| m.max(v))),
                    State::Avg(s, n) => {
                        *s += v;
                        *n += 1;
                    }
                    State::Median(vs) => vs.push(v),
                    State::Welford { n, mean, m2 } => welford_add(n, mean, m2, v),
                    _ => {}
                }
            }
            (State::First(v), Values::Rows(rows, nulls))
                if v.is_none() && !nulls.as_ref().is_some_and(|n| n.is_null(i)) =>
            {
                *v = Some(rows.row(i).as_ref().into());
            }
            (State::Last(v), Values::Rows(rows, nulls))
                if !nulls.as_ref().is_some_and(|n| n.is_null(i)) =>
            {
                *v = Some(rows.row(i).as_ref().into());
            }
            (State::Text(t, _), Values::Text(a, separator)) => {
                if a.is_null(i) {
                    return;
                }
                let v = a.value(i);
                match t {
                    Some(t) => {
                        t.push_str(separator);
                        t.push_str(v);
                    }
                    None => *t = Some(v.to_string()),
                }
            }
            (State::Texts(values, _), Values::Text(a, _)) => {
                if a.is_null(i) {
                    return;
                }
                let v = a.value(i);
                if !values.contains_key(v) {
                    let place = values.len() as u32;
                    values.insert(v.into(), place);
                }
            }
            (State::Distinct(set), Values::Rows(rows, nulls)) => {
                if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                    return;
                }
                let v = rows.row(i);
                if !set.contains(v.as_ref()) {
                    set.insert(v.as_ref().into());
                }
            }
            (State::Hll(regs), Values::Hashes(h, nulls)) => {
                if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                    return;
                }
                let h = h[i];
                let idx = (h >> (64 - HLL_BITS)) as usize;
                let rank = ((h << HLL_BITS) | (1 << (HLL_BITS - 1))).leading_zeros() as u8 + 1;
                regs[idx] = regs[idx].max(rank);
            }
            _ => {}
        }
    }

    /// Merges another state of the same aggregate (combinable aggregates only).
    pub(crate) fn merge(&mut self, other: State) {
        fn opt<T>(a: Option<T>, b: Option<T>, f: impl Fn(T, T) -> T) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(f(a, b)),
                (a, b) => a.or(b),
            }
        }
        match (self, other) {
            (State::Count(a), State::Count(b)) => *a += b,
            (State::SumInt(a), State::SumInt(b)) => *a = opt(*a, b, |x, y| x.wrapping_add(y)),
            (State::SumFloat(a), State::SumFloat(b)) => *a = opt(*a, b, |x, y| x + y),
            (State::MinInt(a), State::MinInt(b)) => *a = opt(*a, b, i64::min),
            (State::MinFloat(a), State::MinFloat(b)) => *a = opt(*a, b, f64::min),
            (State::MaxInt(a), State::MaxInt(b)) => *a = opt(*a, b, i64::max),
            (State::MaxFloat(a), State::MaxFloat(b)) => *a = opt(*a, b, f64::max),
            (State::SumDec(a), State::SumDec(b)) => *a = opt(*a, b, |x, y| x.wrapping_add(y)),
            (State::MinDec(a), State::MinDec(b)) => *a = opt(*a, b, i128::min),
            (State::MaxDec(a), State::MaxDec(b)) => *a = opt(*a, b, i128::max),
            (State::Avg(s, n), State::Avg(s2, n2)) => {
                *s += s2;
                *n += n2;
            }
            (State::AvgInt(s, n), State::AvgInt(s2, n2)) => {
                *s = s.wrapping_add(s2);
                *n += n2;
            }
            (State::AvgDec(s, n), State::AvgDec(s2, n2)) => {
                *s = s.wrapping_add(s2);
                *n += n2;
            }
            (
                State::Welford { n, mean, m2 },
                State::Welford {
                    n: n2,
                    mean: mean2,
                    m2: m2_2,
                },
            ) => welford_merge(n, mean, m2, n2, mean2, m2_2),
            // As Flink's: the earlier state's first value, the later state's last, the texts
            // joined.
            (State::First(a), State::First(b)) => {
                if a.is_none() {
                    *a = b;
                }
            }
            (State::Last(a), State::Last(b)) => {
                if b.is_some() {
                    *a = b;
                }
            }
            (State::Text(a, separator), State::Text(b, _)) => {
                if let Some(b) = b {
                    match a {
                        Some(a) => {
                            a.push_str(separator);
                            a.push_str(&b);
                        }
                        None => *a = Some(b),
                    }
                }
            }
            (State::Texts(a, _), State::Texts(b, _)) => {
                // b's values that a lacks come after a's, in b's order.
                for v in in_order(&b) {
                    if !a.contains_key(v) {
                        let place = a.len() as u32;
                        a.insert(v.into(), place);
                    }
                }
            }
            (State::Hll(a), State::Hll(b)) => {
                for (x, y) in a.iter_mut().zip(b.iter()) {
                    *x = (*x).max(*y);
                }
            }
            (State::Median(a), State::Median(mut b)) => {
                // The smaller list moves: a value moves O(log n) times over any merge order.
                if b.len() > a.len() {
                    std::mem::swap(a, &mut b);
                }
                a.extend(b);
            }
            (State::Distinct(a), State::Distinct(mut b)) => {
                // As for the median: the smaller set moves.
                if b.len() > a.len() {
                    std::mem::swap(a, &mut b);
                }
                a.extend(b);
            }
            // Every state kind merges with its own kind above; a state of another kind is a
            // bug in the caller, never a value to skip (a skipped merge is a wrong answer).
            (a, b) => panic!("internal error: cannot merge aggregate state {b:?} into {a:?}"),
        }
    }

    /// Input values the state keeps (a median's, an exact distinct count's and
    /// LISTAGG(DISTINCT)'s; other states keep none).
    pub(crate) fn values_held(&self) -> usize {
        match self {
            State::Median(v) => v.len(),
            State::Distinct(v) => v.len(),
            State::Texts(v, _) => v.len(),
            _ => 0,
        }
    }

    /// Appends the state to `out` in the byte form state on disk keeps
    /// ([`Bound::decode_state`] reads it back). It holds values only: which variant it is
    /// comes from the aggregate, as [`Bound::init`] says.
    #[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        fn opt<const N: usize>(out: &mut Vec<u8>, v: Option<[u8; N]>) {
            match v {
                Some(b) => {
                    out.push(1);
                    out.extend_from_slice(&b);
                }
                None => out.push(0),
            }
        }
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        match self {
            State::Count(n) => out.extend_from_slice(&n.to_le_bytes()),
            State::SumInt(v) | State::MinInt(v) | State::MaxInt(v) => {
                opt(out, v.map(i64::to_le_bytes))
            }
            State::SumFloat(v) | State::MinFloat(v) | State::MaxFloat(v) => {
                opt(out, v.map(f64::to_le_bytes))
            }
            State::SumDec(v) | State::MinDec(v) | State::MaxDec(v) => {
                opt(out, v.map(i128::to_le_bytes))
            }
            State::Avg(sum, n) => {
                out.extend_from_slice(&sum.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
            State::AvgInt(sum, n) => {
                out.extend_from_slice(&sum.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
            State::AvgDec(sum, n) => {
                out.extend_from_slice(&sum.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
            State::Hll(registers) => out.extend_from_slice(&registers[..]),
            State::Median(values) => {
                out.extend_from_slice(&(values.len() as u32).to_le_bytes());
                for v in values {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            State::Distinct(values) => {
                out.extend_from_slice(&(values.len() as u32).to_le_bytes());
                for v in values {
                    bytes(out, v);
                }
            }
            State::Welford { n, mean, m2 } => {
                out.extend_from_slice(&n.to_le_bytes());
                out.extend_from_slice(&mean.to_le_bytes());
                out.extend_from_slice(&m2.to_le_bytes());
            }
            State::First(v) | State::Last(v) => match v {
                Some(b) => {
                    out.push(1);
                    bytes(out, b);
                }
                None => out.push(0),
            },
            State::Text(t, _) => match t {
                Some(t) => {
                    out.push(1);
                    bytes(out, t.as_bytes());
                }
                None => out.push(0),
            },
            State::Texts(values, _) => {
                out.extend_from_slice(&(values.len() as u32).to_le_bytes());
                for v in in_order(values) {
                    bytes(out, v.as_bytes());
                }
            }
        }
    }

    /// Bytes the state holds beyond its own size.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            State::Hll(_) => HLL_REGISTERS,
            State::Median(v) => v.capacity() * 8,
            State::Distinct(v) => v.iter().map(|k| k.len() + 24).sum(),
            State::First(Some(v)) | State::Last(Some(v)) => v.len(),
            State::Text(Some(t), _) => t.capacity(),
            State::Texts(v, _) => v.keys().map(|k| k.len() + 32).sum(),
            _ => 0,
        }
    }
}

/// Builds the result column of one aggregate from the states of many groups.
pub(crate) fn finish(bound: &Bound, states: &[&State]) -> ArrayRef {
    match &bound.agg.function {
        AggregateFn::FirstValue(_) | AggregateFn::LastValue(_) => return values_of(bound, states),
        AggregateFn::ListAgg(..) => {
            let texts: arrow_array::StringArray = (states.iter())
                .map(|s| match s {
                    State::Text(t, _) => t.as_deref(),
                    _ => None,
                })
                .collect();
            return Arc::new(texts);
        }
        AggregateFn::ListAggDistinct(..) => {
            let texts: arrow_array::StringArray = (states.iter())
                .map(|s| match s {
                    State::Texts(values, sep) if !values.is_empty() => {
                        Some(in_order(values).join(sep))
                    }
                    _ => None,
                })
                .collect();
            return Arc::new(texts);
        }
        _ => {}
    }
    match bound.output_field().data_type() {
        DataType::Float64 => {
            let mut b = Float64Builder::with_capacity(states.len());
            for s in states {
                b.append_option(match s {
                    State::Avg(sum, n) => (*n > 0).then(|| sum / *n as f64),
                    State::Median(v) => median_of(v),
                    // As Flink's WELFORD_M2: NULL without values (or for a negative M2).
                    State::Welford { n, m2, .. } => (*n > 0 && *m2 >= 0.0).then_some(*m2),
                    State::SumFloat(x) | State::MinFloat(x) | State::MaxFloat(x) => *x,
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Decimal128(p, rs) => {
            let in_scale = match bound.num {
                Num::Decimal(_, s) => s,
                _ => *rs,
            };
            let mut b = Decimal128Builder::with_capacity(states.len());
            for s in states {
                b.append_option(match s {
                    State::SumDec(x) | State::MinDec(x) | State::MaxDec(x) => *x,
                    State::AvgDec(sum, n) => {
                        (*n > 0).then(|| decimal_avg(*sum, *n, (*rs - in_scale) as u32))
                    }
                    _ => None,
                });
            }
            Arc::new(
                b.finish()
                    .with_precision_and_scale(*p, *rs)
                    .expect("a valid decimal type"),
            )
        }
        _ => {
            let mut b = Int64Builder::with_capacity(states.len());
            for s in states {
                b.append_option(match s {
                    State::Count(n) => Some(*n),
                    State::SumInt(x) | State::MinInt(x) | State::MaxInt(x) => *x,
                    // Truncated, as Flink's AVG over BIGINT (Java's long division).
                    State::AvgInt(sum, n) => (*n > 0).then(|| sum / n),
                    State::Hll(regs) => Some(hll_estimate(regs)),
                    State::Distinct(v) => Some(v.len() as i64),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
    }
}

/// FIRST_VALUE's or LAST_VALUE's values of many groups, decoded to the column's type (NULL
/// where a group had none).
fn values_of(bound: &Bound, states: &[&State]) -> ArrayRef {
    let conv = (bound.rows.as_ref()).expect("FIRST_VALUE and LAST_VALUE encode their values");
    let null = bound
        .null_row
        .as_deref()
        .expect("the encoded NULL of the column");
    let parser = conv.parser();
    let rows = states.iter().map(|s| match s {
        State::First(Some(v)) | State::Last(Some(v)) => parser.parse(v),
        _ => parser.parse(null),
    });
    conv.convert_rows(rows)
        .expect("rows encoded by this converter decode")
        .remove(0)
}

/// Adds `value` to Welford's count, mean and M2 as Flink's WELFORD_M2 accumulates.
fn welford_add(n: &mut i64, mean: &mut f64, m2: &mut f64, value: f64) {
    *n += 1;
    let delta = value - *mean;
    *mean += delta / *n as f64;
    let delta2 = value - *mean;
    *m2 += delta * delta2;
}

/// Merges another Welford state into one, as Flink's WELFORD_M2 merges (Chan et al.).
fn welford_merge(n: &mut i64, mean: &mut f64, m2: &mut f64, n2: i64, mean2: f64, m2_2: f64) {
    if n2 <= 0 {
        return;
    }
    if *n == 0 {
        (*n, *mean, *m2) = (n2, mean2, m2_2);
        return;
    }
    let count = *n + n2;
    let delta = mean2 - *mean;
    let new_mean = *mean + n2 as f64 / count as f64 * delta;
    let new_m2 = *m2 + m2_2 + *n as f64 * n2 as f64 / count as f64 * delta * delta;
    (*n, *mean, *m2) = (count, new_mean, new_m2);
}

/// A DECIMAL's unscaled value and scale as the nearest DOUBLE (as Java's
/// `BigDecimal.doubleValue`): one correctly rounded division where both operands are exact
/// doubles, else through the decimal text, which Rust reads correctly rounded.
fn decimal_to_f64(unscaled: i128, scale: i8) -> f64 {
    const EXACT: i128 = 1 << 53;
    if (0..=22).contains(&scale) && unscaled.abs() <= EXACT {
        return unscaled as f64 / 10f64.powi(scale as i32);
    }
    format!("{unscaled}e{}", -(scale as i32))
        .parse()
        .unwrap_or(f64::NAN)
}

/// `sum / n` with `extra` more decimal places than `sum`, rounded half up (away from zero at
/// a half), as Flink divides decimals.
fn decimal_avg(sum: i128, n: i64, extra: u32) -> i128 {
    let scaled = sum.saturating_mul(10i128.pow(extra));
    let n = n as i128;
    let q = scaled / n;
    let r = scaled % n;
    if 2 * r.abs() >= n {
        q + scaled.signum()
    } else {
        q
    }
}

/// Builds the partial columns of one aggregate (see [`Bound::partial_fields`]).
pub(crate) fn partials(bound: &Bound, states: &[&State]) -> Vec<ArrayRef> {
    match &bound.agg.function {
        AggregateFn::Avg(_) => {
            let mut n = Int64Builder::with_capacity(states.len());
            let sums: ArrayRef = match bound.num {
                Num::Float => {
                    let mut s = Float64Builder::with_capacity(states.len());
                    for st in states {
                        if let State::Avg(a, c) = st {
                            s.append_value(*a);
                            n.append_value(*c);
                        }
                    }
                    Arc::new(s.finish())
                }
                Num::Int => {
                    let mut s = Int64Builder::with_capacity(states.len());
                    for st in states {
                        if let State::AvgInt(a, c) = st {
                            s.append_value(*a);
                            n.append_value(*c);
                        }
                    }
                    Arc::new(s.finish())
                }
                Num::Decimal(_, scale) => {
                    let mut s = Decimal128Builder::with_capacity(states.len());
                    for st in states {
                        if let State::AvgDec(a, c) = st {
                            s.append_value(*a);
                            n.append_value(*c);
                        }
                    }
                    Arc::new(
                        s.finish()
                            .with_precision_and_scale(38, scale)
                            .expect("a valid decimal type"),
                    )
                }
            };
            vec![sums, Arc::new(n.finish())]
        }
        AggregateFn::FirstValue(_) | AggregateFn::LastValue(_) => vec![values_of(bound, states)],
        AggregateFn::WelfordM2(_) => {
            let mut n = Int64Builder::with_capacity(states.len());
            let mut mean = Float64Builder::with_capacity(states.len());
            let mut m2 = Float64Builder::with_capacity(states.len());
            for st in states {
                if let State::Welford {
                    n: c,
                    mean: u,
                    m2: m,
                } = st
                {
                    n.append_value(*c);
                    mean.append_value(*u);
                    m2.append_value(*m);
                }
            }
            vec![
                Arc::new(n.finish()),
                Arc::new(mean.finish()),
                Arc::new(m2.finish()),
            ]
        }
        AggregateFn::ApproxCountDistinct(_) => {
            let mut b = BinaryBuilder::with_capacity(states.len(), states.len() * HLL_REGISTERS);
            for st in states {
                if let State::Hll(r) = st {
                    b.append_value(&r[..]);
                }
            }
            vec![Arc::new(b.finish())]
        }
        _ => vec![finish(bound, states)],
    }
}

/// Reads the partial state of row `i` from an aggregate's partial columns.
pub(crate) fn read_partial(bound: &Bound, cols: &[ArrayRef], i: usize) -> State {
    let int = |c: &ArrayRef| {
        let a = c.as_primitive::<Int64Type>();
        (!a.is_null(i)).then(|| a.value(i))
    };
    let float = |c: &ArrayRef| {
        let a = c.as_primitive::<Float64Type>();
        (!a.is_null(i)).then(|| a.value(i))
    };
    let dec = |c: &ArrayRef| {
        let a = c.as_primitive::<Decimal128Type>();
        (!a.is_null(i)).then(|| a.value(i))
    };
    match (&bound.agg.function, bound.num) {
        (AggregateFn::Count | AggregateFn::CountValues(_), _) => {
            State::Count(int(&cols[0]).unwrap_or(0))
        }
        (AggregateFn::Sum(_), Num::Int) => State::SumInt(int(&cols[0])),
        (AggregateFn::Sum(_), Num::Float) => State::SumFloat(float(&cols[0])),
        (AggregateFn::Min(_), Num::Int) => State::MinInt(int(&cols[0])),
        (AggregateFn::Min(_), Num::Float) => State::MinFloat(float(&cols[0])),
        (AggregateFn::Max(_), Num::Int) => State::MaxInt(int(&cols[0])),
        (AggregateFn::Max(_), Num::Float) => State::MaxFloat(float(&cols[0])),
        (AggregateFn::Sum(_), Num::Decimal(..)) => State::SumDec(dec(&cols[0])),
        (AggregateFn::Min(_), Num::Decimal(..)) => State::MinDec(dec(&cols[0])),
        (AggregateFn::Max(_), Num::Decimal(..)) => State::MaxDec(dec(&cols[0])),
        (AggregateFn::Avg(_), Num::Float) => {
            State::Avg(float(&cols[0]).unwrap_or(0.0), int(&cols[1]).unwrap_or(0))
        }
        (AggregateFn::Avg(_), Num::Int) => {
            State::AvgInt(int(&cols[0]).unwrap_or(0), int(&cols[1]).unwrap_or(0))
        }
        (AggregateFn::Avg(_), Num::Decimal(..)) => {
            State::AvgDec(dec(&cols[0]).unwrap_or(0), int(&cols[1]).unwrap_or(0))
        }
        (AggregateFn::ApproxCountDistinct(_), _) => {
            let b = cols[0].as_binary::<i32>().value(i);
            let mut regs = Box::new([0u8; HLL_REGISTERS]);
            regs.copy_from_slice(&b[..HLL_REGISTERS.min(b.len())]);
            State::Hll(regs)
        }
        (AggregateFn::Median(_), _) => State::Median(Vec::new()),
        (AggregateFn::CountDistinct(_), _) => State::Distinct(Default::default()),
        (AggregateFn::FirstValue(_) | AggregateFn::LastValue(_), _) => {
            let v = (!cols[0].is_null(i)).then(|| {
                let conv = (bound.rows.as_ref()).expect("FIRST_VALUE and LAST_VALUE encode");
                let rows = conv
                    .convert_columns(&[cols[0].slice(i, 1)])
                    .expect("a value of the column's own type encodes");
                rows.row(0).as_ref().into()
            });
            match bound.agg.function {
                AggregateFn::FirstValue(_) => State::First(v),
                _ => State::Last(v),
            }
        }
        (AggregateFn::ListAgg(_, sep), _) => {
            let a = cols[0].as_string::<i32>();
            State::Text(
                (!a.is_null(i)).then(|| a.value(i).to_string()),
                sep.as_str().into(),
            )
        }
        // Never a partial (LISTAGG(DISTINCT) is not combinable); its state columns are a list.
        (AggregateFn::ListAggDistinct(_, sep), _) => {
            State::Texts(Default::default(), sep.as_str().into())
        }
        (AggregateFn::WelfordM2(_), _) => State::Welford {
            n: int(&cols[0]).unwrap_or(0),
            mean: float(&cols[1]).unwrap_or(0.0),
            m2: float(&cols[2]).unwrap_or(0.0),
        },
    }
}

/// The columns that hold this aggregate's state in checkpoints: its partial columns (see
/// [`Bound::partial_fields`]), or for a median its values as a list.
pub(crate) fn state_fields(bound: &Bound) -> Vec<Field> {
    match &bound.agg.function {
        AggregateFn::Median(_) => vec![Field::new(
            format!("{}__values", bound.agg.output),
            DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true))),
            false,
        )],
        AggregateFn::CountDistinct(_) => vec![Field::new(
            format!("{}__values", bound.agg.output),
            DataType::List(Arc::new(Field::new_list_field(DataType::Binary, true))),
            false,
        )],
        // In the order they first came.
        AggregateFn::ListAggDistinct(..) => vec![Field::new(
            format!("{}__values", bound.agg.output),
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            false,
        )],
        _ => bound.partial_fields(),
    }
}

/// The state columns (see [`state_fields`]) of one aggregate for many groups; they read back
/// exactly with [`read_state`].
pub(crate) fn state_columns(bound: &Bound, states: &[&State]) -> Vec<ArrayRef> {
    if states.is_empty() {
        return (state_fields(bound).iter())
            .map(|f| arrow_array::new_empty_array(f.data_type()))
            .collect();
    }
    match &bound.agg.function {
        AggregateFn::Median(_) => {
            let n: usize = states.iter().map(|s| s.values_held()).sum();
            let mut b = ListBuilder::with_capacity(Float64Builder::with_capacity(n), states.len());
            for st in states {
                if let State::Median(v) = st {
                    b.values().append_slice(v);
                }
                b.append(true);
            }
            vec![Arc::new(b.finish())]
        }
        AggregateFn::CountDistinct(_) => {
            let mut b = ListBuilder::new(BinaryBuilder::new());
            for st in states {
                if let State::Distinct(v) = st {
                    for k in v {
                        b.values().append_value(k);
                    }
                }
                b.append(true);
            }
            vec![Arc::new(b.finish())]
        }
        AggregateFn::ListAggDistinct(..) => {
            let mut b = ListBuilder::new(arrow_array::builder::StringBuilder::new());
            for st in states {
                if let State::Texts(v, _) = st {
                    for k in in_order(v) {
                        b.values().append_value(k);
                    }
                }
                b.append(true);
            }
            vec![Arc::new(b.finish())]
        }
        _ => partials(bound, states),
    }
}

/// Reads the state of row `i` from an aggregate's state columns (see [`state_columns`]).
pub(crate) fn read_state(bound: &Bound, cols: &[ArrayRef], i: usize) -> State {
    match &bound.agg.function {
        AggregateFn::Median(_) => {
            let list = cols[0].as_list::<i32>().value(i);
            State::Median(list.as_primitive::<Float64Type>().values().to_vec())
        }
        AggregateFn::CountDistinct(_) => {
            let list = cols[0].as_list::<i32>().value(i);
            State::Distinct(
                list.as_binary::<i32>()
                    .iter()
                    .flatten()
                    .map(Into::into)
                    .collect(),
            )
        }
        AggregateFn::ListAggDistinct(_, sep) => {
            let list = cols[0].as_list::<i32>().value(i);
            let values = (list.as_string::<i32>().iter().flatten())
                .zip(0..)
                .map(|(v, place)| (v.into(), place))
                .collect();
            State::Texts(values, sep.as_str().into())
        }
        _ => read_partial(bound, cols, i),
    }
}

/// LISTAGG(DISTINCT)'s values in the order they first came.
fn in_order(values: &hashbrown::HashMap<Box<str>, u32>) -> Vec<&str> {
    let mut v: Vec<(&str, u32)> = values.iter().map(|(v, p)| (&**v, *p)).collect();
    v.sort_unstable_by_key(|(_, place)| *place);
    v.into_iter().map(|(v, _)| v).collect()
}

/// The layout of an aggregation's checkpointed state: the key group
/// (`weir_state::snapshot::KEY_GROUP_COLUMN`), the encoded key (`key`), the `extra` BIGINT
/// columns, then each aggregate's state columns ([`state_fields`]).
pub(crate) fn state_schema(extra: &[&str], bound: &[Bound]) -> SchemaRef {
    let mut fields = vec![
        Field::new(
            weir_state::snapshot::KEY_GROUP_COLUMN,
            DataType::UInt16,
            false,
        ),
        Field::new("key", DataType::Binary, false),
    ];
    fields.extend(extra.iter().map(|c| Field::new(*c, DataType::Int64, false)));
    fields.extend(bound.iter().flat_map(state_fields));
    Arc::new(Schema::new(fields))
}

/// One group's row of checkpointed state: its encoded key, its `extra` values, its states.
pub(crate) type StateRow<'a> = (&'a [u8], Vec<i64>, &'a [State]);

/// Batches of `rows` in `schema` (made by [`state_schema`]), at most 8,192 rows each, at least
/// one batch. Each row's key group is that of its key among `key_groups`, as keyed exchanges
/// route it.
pub(crate) fn state_batches(
    schema: &SchemaRef,
    key_groups: u16,
    bound: &[Bound],
    rows: &[StateRow],
) -> Result<Vec<RecordBatch>> {
    let extra =
        schema.fields().len() - 2 - bound.iter().map(|b| state_fields(b).len()).sum::<usize>();
    let mut out = Vec::new();
    for chunk in rows.chunks(8192) {
        let groups = (chunk.iter())
            .map(|r| weir_core::keys::key_group(hash_key(r.0), key_groups))
            .collect();
        let mut cols: Vec<ArrayRef> = vec![
            weir_state::snapshot::key_group_column(groups),
            Arc::new(BinaryArray::from_iter_values(chunk.iter().map(|r| r.0))),
        ];
        for j in 0..extra {
            cols.push(Arc::new(Int64Array::from_iter_values(
                chunk.iter().map(|r| r.1[j]),
            )));
        }
        for (j, b) in bound.iter().enumerate() {
            let states: Vec<&State> = chunk.iter().map(|r| &r.2[j]).collect();
            cols.extend(state_columns(b, &states));
        }
        out.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    if out.is_empty() {
        out.push(RecordBatch::new_empty(schema.clone()));
    }
    Ok(out)
}

/// Checkpointed state rows being read back (see [`state_batches`]).
pub(crate) struct StateReader {
    keys: BinaryArray,
    extra: Vec<Int64Array>,
    /// Each aggregate's state columns.
    states: Vec<Vec<ArrayRef>>,
}

impl StateReader {
    /// Reads `batch` as `schema` says; `what` names the operator in errors.
    ///
    /// # Errors
    /// `Internal` if a column is missing or of another type (state of another version or
    /// operator).
    pub(crate) fn new(
        what: &str,
        schema: &SchemaRef,
        bound: &[Bound],
        batch: &RecordBatch,
    ) -> Result<StateReader> {
        let n_extra =
            schema.fields().len() - 2 - bound.iter().map(|b| state_fields(b).len()).sum::<usize>();
        let mut cols = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let c = batch
                .column_by_name(f.name())
                .filter(|c| c.data_type() == f.data_type())
                .filter(|c| f.is_nullable() || c.null_count() == 0)
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "{what} state has no column `{}` of type {}{}: it was not written by \
                         this version of the operator",
                        f.name(),
                        f.data_type(),
                        if f.is_nullable() {
                            ""
                        } else {
                            " without NULLs"
                        }
                    ))
                })?;
            cols.push(c.clone());
        }
        let mut cols = cols.into_iter().skip(1);
        let keys = cols
            .next()
            .expect("a key column")
            .as_binary::<i32>()
            .clone();
        let extra = (cols.by_ref().take(n_extra))
            .map(|c| c.as_primitive::<Int64Type>().clone())
            .collect();
        let states = (bound.iter())
            .map(|b| cols.by_ref().take(state_fields(b).len()).collect())
            .collect();
        Ok(StateReader {
            keys,
            extra,
            states,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Row `i`: its encoded key, its `extra` values, its states.
    pub(crate) fn row(&self, bound: &[Bound], i: usize) -> (&[u8], Vec<i64>, Vec<State>) {
        (
            self.keys.value(i),
            self.extra.iter().map(|c| c.value(i)).collect(),
            (bound.iter().zip(&self.states))
                .map(|(b, cols)| read_state(b, cols, i))
                .collect(),
        )
    }
}

/// The median of unsorted values, in O(n): the middle one, or the mean of the two middle ones.
fn median_of(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    let n = s.len();
    let (below, &mut upper, _) = s.select_nth_unstable_by(n / 2, f64::total_cmp);
    Some(if n % 2 == 1 {
        upper
    } else {
        let lower = below
            .iter()
            .copied()
            .max_by(f64::total_cmp)
            .expect("n >= 2");
        (lower + upper) / 2.0
    })
}

/// The HyperLogLog estimate with the small-range correction.
fn hll_estimate(regs: &[u8; HLL_REGISTERS]) -> i64 {
    let m = HLL_REGISTERS as f64;
    let alpha = 0.7213 / (1.0 + 1.079 / m);
    let sum: f64 = regs.iter().map(|&r| 2f64.powi(-(r as i32))).sum();
    let raw = alpha * m * m / sum;
    let zeros = regs.iter().filter(|&&r| r == 0).count();
    let est = if raw <= 2.5 * m && zeros > 0 {
        m * (m / zeros as f64).ln()
    } else {
        raw
    };
    est.round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hll_estimates_distinct_values_within_a_few_percent() {
        let mut regs = Box::new([0u8; HLL_REGISTERS]);
        let mut s = State::Hll(Box::new([0; HLL_REGISTERS]));
        for n in [100u64, 10_000, 200_000] {
            regs.fill(0);
            let hashes: Vec<u64> = (0..n).map(|i| hash_key(&i.to_le_bytes())).collect();
            let v = Values::Hashes(hashes, None);
            s = State::Hll(regs.clone());
            for i in 0..n as usize {
                s.update(&v, i);
            }
            let est = match &s {
                State::Hll(r) => hll_estimate(r),
                _ => unreachable!(),
            } as f64;
            assert!(
                (est - n as f64).abs() / n as f64 <= 0.05,
                "{n}: estimated {est}"
            );
        }
        let _ = s;
    }

    /// Every aggregate function over every type it reads, on columns `i` (BIGINT), `f`
    /// (DOUBLE holding integers, so sums are exact in any order), `d` (DECIMAL(10, 2)) and `s`
    /// (STRING), all from one list of optional integers.
    fn every_aggregate() -> Vec<Aggregate> {
        let mut v = vec![count("n")];
        for c in ["i", "f", "d"] {
            v.extend([
                count_values(c, "cv"),
                sum(c, "sum"),
                min(c, "min"),
                max(c, "max"),
                avg(c, "avg"),
                median(c, "median"),
            ]);
        }
        for c in ["i", "f", "d", "s"] {
            v.extend([approx_count_distinct(c, "acd"), count_distinct(c, "cd")]);
        }
        // Every kind of state is made by some aggregate above.
        v
    }

    fn batch_of(values: &[Option<i64>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("d", DataType::Decimal128(10, 2), true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let i: Int64Array = values.iter().copied().collect();
        let f: arrow_array::Float64Array = values.iter().map(|v| v.map(|x| x as f64)).collect();
        let d = arrow_array::Decimal128Array::from_iter(
            values.iter().map(|v| v.map(|x| x as i128 * 7)),
        )
        .with_precision_and_scale(10, 2)
        .unwrap();
        let s: arrow_array::StringArray =
            values.iter().map(|v| v.map(|x| format!("v{x}"))).collect();
        RecordBatch::try_new(
            schema,
            vec![Arc::new(i), Arc::new(f), Arc::new(d), Arc::new(s)],
        )
        .unwrap()
    }

    proptest::proptest! {
        /// Sessions merge in any order: the states of rows spread over several groups, merged
        /// pairwise in a random order, give the result of one state over all the rows, for
        /// every aggregate function (issue #24: COUNT(DISTINCT x) lost one side's values).
        #[test]
        fn merged_states_in_any_order_equal_one_state_over_all_rows(
            rows in proptest::collection::vec(
                (proptest::option::weighted(0.85, -20i64..20), 0usize..4),
                0..40,
            ),
            picks in proptest::collection::vec((0usize..8, 0usize..8), 8),
        ) {
            let values: Vec<Option<i64>> = rows.iter().map(|r| r.0).collect();
            let batch = batch_of(&values);
            for agg in every_aggregate() {
                let bound = Bound::new(&agg, &batch.schema()).unwrap();
                let vals = bound.values(&batch).unwrap();
                let mut whole = bound.init();
                let mut groups: Vec<State> = (0..4).map(|_| bound.init()).collect();
                for (i, (_, g)) in rows.iter().enumerate() {
                    whole.update(&vals, i);
                    groups[*g].update(&vals, i);
                }
                let mut picks = picks.iter().cycle();
                while groups.len() > 1 {
                    let (a, b) = picks.next().unwrap();
                    let (a, b) = (a % groups.len(), b % (groups.len() - 1));
                    let other = groups.remove(b);
                    let into = if a >= groups.len() { groups.len() - 1 } else { a };
                    groups[into].merge(other);
                }
                let merged = groups.pop().unwrap();
                proptest::prop_assert_eq!(
                    finish(&bound, &[&merged]).to_data(),
                    finish(&bound, &[&whole]).to_data(),
                    "{:?} over {:?}",
                    agg.function,
                    values
                );
            }
        }
    }

    proptest::proptest! {
        /// State on disk: every kind of state, encoded and decoded, gives the result it gave
        /// before, and the decoder reads exactly what the encoder wrote.
        #[test]
        fn states_read_back_from_their_bytes_give_the_same_result(
            values in proptest::collection::vec(proptest::option::weighted(0.8, -50i64..50), 0..30),
        ) {
            let batch = batch_of(&values);
            let mut aggs = every_aggregate();
            for c in ["i", "f", "d", "s"] {
                aggs.extend([first_value(c, "fv"), last_value(c, "lv")]);
            }
            aggs.extend([
                list_agg("s", "|", "la"),
                list_agg_distinct("s", "|", "lad"),
                welford_m2("f", "m2"),
            ]);
            for agg in aggs {
                let bound = Bound::new(&agg, &batch.schema()).unwrap();
                let vals = bound.values(&batch).unwrap();
                let mut state = bound.init();
                for i in 0..values.len() {
                    state.update(&vals, i);
                }
                let mut bytes = Vec::new();
                state.encode(&mut bytes);
                bytes.extend_from_slice(b"next");
                let mut r = weir_state::bytes::Reader::new("a state", &bytes);
                let back = bound.decode_state(&mut r).unwrap();
                proptest::prop_assert_eq!(r.rest(), &b"next"[..], "{:?}", agg.function);
                proptest::prop_assert_eq!(
                    finish(&bound, &[&back]).to_data(),
                    finish(&bound, &[&state]).to_data(),
                    "{:?} over {:?}",
                    agg.function,
                    values
                );
            }
        }
    }

    #[test]
    fn listagg_distinct_keeps_each_value_once_where_it_first_came() {
        let batch = batch_of(&[Some(3), Some(1), None, Some(3), Some(2), Some(1)]);
        let agg = list_agg_distinct("s", ";", "l");
        let bound = Bound::new(&agg, &batch.schema()).unwrap();
        let vals = bound.values(&batch).unwrap();
        let (mut whole, mut a, mut b) = (bound.init(), bound.init(), bound.init());
        for i in 0..6 {
            whole.update(&vals, i);
            if i < 3 { &mut a } else { &mut b }.update(&vals, i);
        }
        let text = |s: &State| {
            let col = finish(&bound, &[s]);
            col.as_string::<i32>().value(0).to_string()
        };
        assert_eq!(text(&whole), "v3;v1;v2");
        // A merge appends the other side's new values in their order.
        a.merge(b);
        assert_eq!(text(&a), "v3;v1;v2");
        // Checkpoint columns keep the order.
        let cols = state_columns(&bound, &[&whole]);
        assert_eq!(text(&read_state(&bound, &cols, 0)), "v3;v1;v2");
        assert!(finish(&bound, &[&bound.init()]).is_null(0));
    }

    #[test]
    fn median_is_exact_and_refused_for_two_phase() {
        assert_eq!(median_of(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_of(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median_of(&[5.0, 5.0, 1.0, 9.0, 5.0, 2.0]), Some(5.0));
        assert_eq!(median_of(&[]), None);
        let err = median("latency", "p50").combinable().unwrap_err();
        assert!(err.contains("not combinable"), "{err}");
        assert!(count("n").combinable().is_ok());
    }
}
