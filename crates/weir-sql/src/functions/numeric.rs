//! Flink's SIGN and TRUNCATE, of Flink's types (DataFusion's `signum` and `trunc` give
//! DOUBLE): SIGN keeps its argument's type (SIGN(DECIMAL(10, 2)) is -1.00); TRUNCATE too, but
//! for a DECIMAL(p, s) cut to d < s digits, which is a DECIMAL(1 + p - s + d, d) (DECIMAL(1 + p -
//! s, 0) for d < 0), as Flink's: TRUNCATE(DECIMAL(10, 2), 1) is 355.3. TRUNCATE of a DOUBLE cuts
//! its shortest decimal form (Flink goes through `BigDecimal.valueOf`), so TRUNCATE(0.29, 2) is
//! 0.29, not 0.28.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Decimal128Array, Float64Array, Int64Array};
use arrow_schema::{DataType, Field, FieldRef};
use datafusion_common::{plan_err, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::on_arrays;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Sign,
    Truncate,
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Numeric {
    op: Op,
    signature: Signature,
}

impl Numeric {
    pub(crate) fn udfs() -> [Arc<ScalarUDF>; 2] {
        [Op::Sign, Op::Truncate].map(|op| {
            Arc::new(ScalarUDF::new_from_impl(Numeric {
                op,
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
    }

    fn usage(&self) -> &'static str {
        match self.op {
            Op::Sign => "SIGN(numeric)",
            Op::Truncate => "TRUNCATE(numeric[, INT digits])",
        }
    }
}

/// The types SIGN and TRUNCATE keep; others are refused.
fn numeric(t: &DataType) -> bool {
    t.is_integer()
        || matches!(
            t,
            DataType::Float32 | DataType::Float64 | DataType::Decimal128(..)
        )
}

impl ScalarUDFImpl for Numeric {
    fn name(&self) -> &str {
        match self.op {
            Op::Sign => "sign",
            Op::Truncate => "truncate",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        let max_args = if self.op == Op::Truncate { 2 } else { 1 };
        if arg_types.is_empty() || arg_types.len() > max_args {
            return plan_err!("expected {}", self.usage());
        }
        let value = match &arg_types[0] {
            DataType::Null => DataType::Int32,
            t if numeric(t) => t.clone(),
            t => return plan_err!("{} takes a number, not {t}", self.usage()),
        };
        let mut out = vec![value];
        if let Some(digits) = arg_types.get(1) {
            if !(digits.is_integer() || digits.is_null()) {
                return plan_err!("{}: the digits are an INT, not {digits}", self.usage());
            }
            out.push(DataType::Int64);
        }
        Ok(out)
    }

    fn return_type(&self, arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> datafusion_common::Result<FieldRef> {
        let t = args.arg_fields[0].data_type().clone();
        let t = match (&t, self.op) {
            (DataType::Decimal128(p, s), Op::Truncate) => {
                let digits = match args.scalar_arguments.get(1) {
                    None => Some(0),
                    Some(Some(v)) => match v {
                        ScalarValue::Int64(d) => *d,
                        _ => return plan_err!("{}: the digits are an INT", self.usage()),
                    },
                    Some(None) => {
                        return plan_err!(
                            "TRUNCATE of a DECIMAL takes its digits as a constant (its result's \
                             scale is that number)"
                        )
                    }
                };
                match digits {
                    Some(d) => truncated_decimal(*p, *s, d),
                    None => t.clone(),
                }
            }
            _ => t,
        };
        Ok(Arc::new(Field::new(self.name(), t, true)))
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        let op = self.op;
        let returns = args.return_field.data_type().clone();
        on_arrays(&args, |arrays| {
            let value = &arrays[0];
            let t = value.data_type().clone();
            let digits: Vec<Option<i64>> = match arrays.get(1) {
                Some(d) => d.as_primitive::<Int64Type>().iter().collect(),
                None => vec![Some(0); value.len()],
            };
            let out: ArrayRef = match &t {
                DataType::Decimal128(p, s) => {
                    let v = value.as_primitive::<Decimal128Type>();
                    let out: Decimal128Array = v
                        .iter()
                        .zip(&digits)
                        .map(|(v, d)| {
                            let (v, d) = (v?, (*d)?);
                            Some(match op {
                                Op::Sign => v.signum() * 10i128.pow(u32::from(s.unsigned_abs())),
                                Op::Truncate => cut(v, i64::from(*s) - d),
                            })
                        })
                        .collect();
                    let out = out.with_precision_and_scale(*p, *s)?;
                    // At the scale of Flink's type: the digits cut are zeros.
                    arrow_cast::cast(&out, &returns)?
                }
                DataType::Float32 | DataType::Float64 => {
                    let f = arrow_cast::cast(value, &DataType::Float64)?;
                    let out: Float64Array = f
                        .as_primitive::<Float64Type>()
                        .iter()
                        .zip(&digits)
                        .map(|(v, d)| {
                            let (v, d) = (v?, (*d)?);
                            Some(match op {
                                // Java's Math.signum: 0.0 and -0.0 and NaN stay as they are.
                                Op::Sign if v > 0.0 => 1.0,
                                Op::Sign if v < 0.0 => -1.0,
                                Op::Sign => v,
                                Op::Truncate => truncate_double(v, d),
                            })
                        })
                        .collect();
                    arrow_cast::cast(&out, &t)?
                }
                _ => {
                    let i = arrow_cast::cast(value, &DataType::Int64)?;
                    let out: Int64Array = i
                        .as_primitive::<Int64Type>()
                        .iter()
                        .zip(&digits)
                        .map(|(v, d)| {
                            let (v, d) = (v?, (*d)?);
                            Some(match op {
                                Op::Sign => v.signum(),
                                Op::Truncate => cut(i128::from(v), -d) as i64,
                            })
                        })
                        .collect();
                    arrow_cast::cast(&out, &t)?
                }
            };
            Ok(out)
        })
    }
}

/// Flink's type of TRUNCATE(DECIMAL(p, s), digits).
fn truncated_decimal(p: u8, s: i8, digits: i64) -> DataType {
    let (p, s16) = (i64::from(p), i64::from(s));
    if digits >= s16 {
        return DataType::Decimal128(p as u8, s);
    }
    let scale = digits.max(0);
    let precision = (1 + p - s16 + scale).clamp(1, 38);
    DataType::Decimal128(precision as u8, scale as i8)
}

/// `v` with its last `places` decimal digits zeroed, toward zero (nothing for places ≤ 0).
fn cut(v: i128, places: i64) -> i128 {
    if places <= 0 {
        return v;
    }
    match 10i128.checked_pow(u32::try_from(places).unwrap_or(u32::MAX)) {
        Some(f) => v - v % f,
        None => 0,
    }
}

/// `v` cut to `digits` decimal places (left of the point when negative), toward zero, on its
/// shortest decimal form.
fn truncate_double(v: f64, digits: i64) -> f64 {
    if !v.is_finite() {
        return v;
    }
    let text = format!("{v}");
    let (sign, unsigned) = match text.strip_prefix('-') {
        Some(u) => ("-", u),
        None => ("", text.as_str()),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let cut = if digits >= 0 {
        let keep = usize::try_from(digits)
            .unwrap_or(usize::MAX)
            .min(frac.len());
        format!("{sign}{int}.{}0", &frac[..keep])
    } else {
        let zeros = usize::try_from(-digits).unwrap_or(usize::MAX);
        if zeros >= int.len() {
            return 0.0;
        }
        format!("{sign}{}{}", &int[..int.len() - zeros], "0".repeat(zeros))
    };
    // A zero has no sign in Flink (a BigDecimal's): never -0.0.
    match cut.parse::<f64>() {
        Ok(0.0) => 0.0,
        Ok(r) => r,
        Err(_) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_cuts_digits_toward_zero() {
        assert_eq!(cut(35536, 1), 35530);
        assert_eq!(cut(-35536, 2), -35500);
        assert_eq!(cut(123, 0), 123);
        assert_eq!(cut(123, 40), 0);
        assert_eq!(truncate_double(0.29, 2), 0.29);
        assert_eq!(truncate_double(42.345, 1), 42.3);
        assert_eq!(truncate_double(-42.345, 2), -42.34);
        assert_eq!(truncate_double(1234.5, -2), 1200.0);
        assert_eq!(truncate_double(12.5, -3), 0.0);
        assert_eq!(truncate_double(7.0, 3), 7.0);
        for zero in [truncate_double(-0.004, 2), truncate_double(-12.5, -3)] {
            assert!(zero == 0.0 && zero.is_sign_positive(), "{zero}");
        }
    }
}

/// The two markers of FLOOR / CEIL(t TO unit)'s rewrite (see `datetime::floor_ceil_to_unit`),
/// each giving its first argument back as it is:
/// - `weir_floor_ceil_arg(t)`: what the rewrite floors, `t`, when it is a TIMESTAMP; a DATE or
///   TIME is refused, since DATE_TRUNC would make a TIMESTAMP of a DATE where Flink's FLOOR
///   keeps the DATE;
/// - `weir_floor_ceil_of(result, t)`: the rewrite's result, marked with the value it floors,
///   which crate::zone reads to take the floor of a TIMESTAMP_LTZ in local time.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct FloorCeil {
    /// The result marker (else the argument's).
    of: bool,
    signature: Signature,
}

/// The name of the argument's marker.
pub(crate) const FLOOR_CEIL_ARG: &str = "weir_floor_ceil_arg";

/// The name of the result's marker.
pub(crate) const FLOOR_CEIL_OF: &str = "weir_floor_ceil_of";

impl FloorCeil {
    pub(crate) fn udfs() -> [Arc<ScalarUDF>; 2] {
        [false, true].map(|of| {
            Arc::new(ScalarUDF::new_from_impl(FloorCeil {
                of,
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
    }
}

impl ScalarUDFImpl for FloorCeil {
    fn name(&self) -> &str {
        if self.of {
            FLOOR_CEIL_OF
        } else {
            FLOOR_CEIL_ARG
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        match (self.of, arg_types) {
            (true, [r, t]) => Ok(vec![r.clone(), t.clone()]),
            (true, _) => plan_err!("{FLOOR_CEIL_OF} takes the result and the value floored"),
            (false, [t @ (DataType::Timestamp(..) | DataType::Null)]) => Ok(vec![t.clone()]),
            (false, [t]) => plan_err!(
                "FLOOR / CEIL(x TO unit) takes a TIMESTAMP in weir, not {t}; for a DATE, floor \
                 CAST(x AS TIMESTAMP(3))"
            ),
            (false, _) => plan_err!("FLOOR / CEIL(x TO unit) takes one TIMESTAMP"),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(
        &self,
        mut args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        Ok(args.args.remove(0))
    }
}
