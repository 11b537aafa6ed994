//! Flink's DECIMAL division, where Arrow's differs: Arrow gives `s1 + 4` digits after the point
//! and truncates; Flink gives the type of `LogicalTypeMerging.findDivisionDecimalType` (scale
//! `max(6, s1 + p2 + 1)`, precision `p1 - s1 + s2 + scale`, narrowed to 38 digits keeping at
//! least 6 after the point) and rounds half up, with integer operands taken as the DECIMAL of
//! their type (INT as DECIMAL(10, 0), BIGINT as DECIMAL(19, 0)) and an integer literal as an
//! INT when it fits one. A quotient beyond the type's precision is NULL, as in Flink.
//! `DECIMAL(10, 2) / INT` is DECIMAL(21, 13).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Decimal128Type;
use arrow_array::{Array, ArrayRef, Decimal128Array};
use arrow_buffer::i256;
use arrow_schema::DataType;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::expr::{BinaryExpr, ScalarFunction};
use datafusion_expr::{
    ColumnarValue, Expr, ExprSchemable, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};

use super::on_arrays;

/// The DECIMAL(precision, scale) Flink gives an exact numeric type in arithmetic; `None` for
/// other types.
fn as_decimal(t: &DataType) -> Option<(u8, i8)> {
    Some(match t {
        DataType::Decimal128(p, s) => (*p, *s),
        DataType::Int8 | DataType::UInt8 => (3, 0),
        DataType::Int16 | DataType::UInt16 => (5, 0),
        DataType::Int32 | DataType::UInt32 => (10, 0),
        DataType::Int64 => (19, 0),
        DataType::UInt64 => (20, 0),
        _ => return None,
    })
}

/// Flink's `findDivisionDecimalType` with its `adjustPrecisionScale`.
pub(crate) fn division_type(p1: u8, s1: i8, p2: u8, s2: i8) -> (u8, i8) {
    let (p1, s1, p2, s2) = (i32::from(p1), i32::from(s1), i32::from(p2), i32::from(s2));
    let scale = 6.max(s1 + p2 + 1);
    let precision = p1 - s1 + s2 + scale;
    if precision <= 38 {
        (precision.max(1) as u8, scale as i8)
    } else {
        let integral = precision - scale;
        (38, (38 - integral).max(scale.min(6)) as i8)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct DecimalDivide {
    signature: Signature,
}

impl ScalarUDFImpl for DecimalDivide {
    fn name(&self) -> &str {
        "flink_decimal_divide"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        arg_types
            .iter()
            .map(|t| match as_decimal(t) {
                Some((p, s)) => Ok(DataType::Decimal128(p, s)),
                None => datafusion_common::plan_err!("DECIMAL division of {t}"),
            })
            .collect()
    }

    fn return_type(&self, arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        match (
            arg_types.first().and_then(as_decimal),
            arg_types.get(1).and_then(as_decimal),
        ) {
            (Some((p1, s1)), Some((p2, s2))) => {
                let (p, s) = division_type(p1, s1, p2, s2);
                Ok(DataType::Decimal128(p, s))
            }
            _ => datafusion_common::plan_err!("DECIMAL division of {arg_types:?}"),
        }
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        let out_type = args.return_type().clone();
        on_arrays(&args, |arrays| {
            let (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)) =
                (arrays[0].data_type(), arrays[1].data_type())
            else {
                return datafusion_common::internal_err!("DECIMAL division of other types");
            };
            let DataType::Decimal128(p, s) = out_type else {
                return datafusion_common::internal_err!("DECIMAL division into {out_type}");
            };
            let (l, r) = (
                arrays[0].as_primitive::<Decimal128Type>(),
                arrays[1].as_primitive::<Decimal128Type>(),
            );
            // value = (l / 10^s1) / (r / 10^s2); scaled by 10^s: l * 10^(s - s1 + s2) / r.
            let shift = i32::from(s) - i32::from(*s1) + i32::from(*s2);
            let limit = i256::from_i128(10).wrapping_pow(u32::from(p));
            let mut out = Vec::with_capacity(l.len());
            for i in 0..l.len() {
                if l.is_null(i) || r.is_null(i) {
                    out.push(None);
                    continue;
                }
                let (a, b) = (l.value(i), r.value(i));
                if b == 0 {
                    return datafusion_common::exec_err!("division by zero");
                }
                out.push(divide(a, b, shift).filter(|q| q.wrapping_abs() < limit));
            }
            let values: Decimal128Array = out
                .into_iter()
                .map(|q| q.and_then(|q| q.to_i128()))
                .collect();
            Ok(Arc::new(values.with_precision_and_scale(p, s)?) as ArrayRef)
        })
    }
}

/// `a * 10^shift / b` rounded half up (away from zero at a half); `None` if it does not fit
/// 256 bits.
fn divide(a: i128, b: i128, shift: i32) -> Option<i256> {
    let ten = i256::from_i128(10);
    let (mut n, mut d) = (i256::from_i128(a), i256::from_i128(b));
    if shift >= 0 {
        n = n.checked_mul(ten.checked_pow(shift as u32)?)?;
    } else {
        d = d.checked_mul(ten.checked_pow((-shift) as u32)?)?;
    }
    let (q, r) = (n.checked_div(d)?, n.checked_rem(d)?);
    let twice = r.wrapping_abs().checked_mul(i256::from_i128(2))?;
    Some(if twice >= d.wrapping_abs() {
        let negative = (n < i256::ZERO) != (d < i256::ZERO);
        if negative {
            q - i256::ONE
        } else {
            q + i256::ONE
        }
    } else {
        q
    })
}

/// `e` with every division of exact numbers of which one is a DECIMAL done as Flink does it
/// (see the module docs). Runs on the expression as planned, before type coercion.
///
/// # Errors
/// None in practice: an operand whose type does not resolve is left to the planner.
pub(crate) fn flink_division(e: Expr, schema: &DFSchema) -> datafusion_common::Result<Expr> {
    let udf = Arc::new(ScalarUDF::new_from_impl(DecimalDivide {
        signature: Signature::user_defined(Volatility::Immutable),
    }));
    // An integer literal is an INT in Flink when it fits one.
    let narrow = |e: Expr| match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), meta) if i32::try_from(v).is_ok() => {
            Expr::Literal(ScalarValue::Int32(Some(v as i32)), meta)
        }
        e => e,
    };
    e.transform_up(|e| {
        let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Divide,
            right,
        }) = e
        else {
            return Ok(Transformed::no(e));
        };
        let (lt, rt) = (left.get_type(schema), right.get_type(schema));
        let decimal =
            |t: &datafusion_common::Result<DataType>| matches!(t, Ok(DataType::Decimal128(..)));
        let exact = |t: &datafusion_common::Result<DataType>| {
            t.as_ref().is_ok_and(|t| as_decimal(t).is_some())
        };
        if (decimal(&lt) || decimal(&rt)) && exact(&lt) && exact(&rt) {
            return Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(udf.clone(), vec![narrow(*left), narrow(*right)]),
            )));
        }
        Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Divide,
            right,
        })))
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_types_are_flinks() {
        // DECIMAL(10, 2) / INT, and the cases of Flink's own LogicalTypeMergingTest.
        assert_eq!(division_type(10, 2, 10, 0), (21, 13));
        assert_eq!(division_type(32, 8, 38, 8), (38, 6));
        assert_eq!(division_type(30, 20, 30, 20), (38, 8));
        assert_eq!(division_type(12, 6, 19, 0), (32, 26));
    }

    #[test]
    fn quotients_round_half_up_away_from_zero() {
        // 1.00 / 3 at scale 13: 0.3333333333333.
        assert_eq!(
            divide(100, 3, 13 - 2),
            Some(i256::from_i128(3_333_333_333_333))
        );
        // 2 / 3 rounds up, -2 / 3 down; 1 / 8 = 0.125 at scale 2 is 0.13, -0.13.
        assert_eq!(divide(2, 3, 0), Some(i256::from_i128(1)));
        assert_eq!(divide(-2, 3, 0), Some(i256::from_i128(-1)));
        assert_eq!(divide(1, 8, 2), Some(i256::from_i128(13)));
        assert_eq!(divide(1, -8, 2), Some(i256::from_i128(-13)));
        assert_eq!(divide(-1, -8, 2), Some(i256::from_i128(13)));
        // A negative shift divides the divisor up.
        assert_eq!(divide(1_000, 1, -2), Some(i256::from_i128(10)));
    }
}
