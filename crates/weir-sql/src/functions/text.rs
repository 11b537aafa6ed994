//! Where Flink's text functions and casts give other values than DataFusion's: CONCAT is NULL
//! when any argument is NULL (DataFusion's skips NULLs; CONCAT_WS skips them in both), and text
//! cast to an integer type is read as Flink reads it, a fraction truncated (`CAST('3.5' AS INT)`
//! is 3; Arrow's cast fails on it).

use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BinaryArray, StringArray};
use arrow_schema::{DataType, FieldRef};
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::DFSchema;
use datafusion_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion_expr::{
    ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::on_arrays;
use super::same_name::{cast_rule, CastRule};

/// Flink's CONCAT: the arguments' text joined, NULL when any is NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Concat {
    signature: Signature,
}

impl Concat {
    pub(crate) fn udf() -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::new_from_impl(Concat {
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    }
}

impl ScalarUDFImpl for Concat {
    fn name(&self) -> &str {
        "concat"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        if arg_types.is_empty() {
            return datafusion_common::plan_err!(
                "CONCAT takes at least one argument: CONCAT(STRING, ...)"
            );
        }
        // BYTES joined are BYTES, as in Flink; otherwise any argument as its text, as
        // DataFusion's CONCAT takes them.
        let binary = |t: &DataType| {
            matches!(
                t,
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView
            )
        };
        let to = if arg_types.iter().all(binary) {
            DataType::Binary
        } else {
            DataType::Utf8
        };
        Ok(vec![to; arg_types.len()])
    }

    fn return_type(&self, arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(match arg_types.first() {
            Some(DataType::Binary) => DataType::Binary,
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        on_arrays(&args, |arrays| {
            // Text is joined as its bytes (UTF-8 joined is UTF-8) and read back as text.
            let out_type = arrays
                .first()
                .map_or(DataType::Utf8, |a| a.data_type().clone());
            let parts = (arrays.iter())
                .map(|a| arrow_cast::cast(a, &DataType::Binary))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let parts: Vec<&BinaryArray> = parts.iter().map(|a| a.as_binary::<i32>()).collect();
            let rows = parts.first().map_or(0, |a| a.len());
            let mut out = BinaryBuilder::with_capacity(rows, 0);
            let mut bytes = Vec::new();
            for i in 0..rows {
                if parts.iter().any(|p| p.is_null(i)) {
                    out.append_null();
                    continue;
                }
                bytes.clear();
                for p in &parts {
                    bytes.extend_from_slice(p.value(i));
                }
                out.append_value(&bytes);
            }
            let joined: ArrayRef = Arc::new(out.finish());
            Ok(arrow_cast::cast(&joined, &out_type)?)
        })
    }
}

/// Text as Flink's cast to an integer type reads it, handed on to Arrow's cast: spaces around
/// it dropped and a fraction of digits cut (`' -3.9 '` is `-3`, `'.5'` is `0`, as Flink's
/// `BinaryStringDataUtil.toLong`). Text Flink does not read as an integer is passed on as it
/// is, so the cast fails on it (a dead letter) or, in TRY_CAST, is NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct IntegralText {
    signature: Signature,
}

fn integral_text(s: &str) -> Option<String> {
    let t = s.trim_matches(' ');
    let (negative, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if body.is_empty() {
        return None;
    }
    let (whole, fraction) = body.split_once('.').unwrap_or((body, ""));
    let digits = |x: &str| x.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole = if whole.is_empty() { "0" } else { whole };
    Some(format!("{}{whole}", if negative { "-" } else { "" }))
}

impl ScalarUDFImpl for IntegralText {
    fn name(&self) -> &str {
        "flink_integral_text"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        on_arrays(&args, |arrays| {
            let text = arrays[0].as_string::<i32>();
            let out: StringArray = text
                .iter()
                .map(|t| t.map(|t| integral_text(t).unwrap_or_else(|| t.to_string())))
                .collect();
            Ok(Arc::new(out) as ArrayRef)
        })
    }
}

/// `e` with Flink's casts where they differ from Arrow's: every CAST and TRY_CAST of text to
/// an integer type reads the text as Flink does (see [`IntegralText`]), and the others of
/// `super::same_name::cast_rule` by the type `type_of` gives what is cast once coerced. Runs on the expression
/// as planned, before type coercion (whose own casts, of text compared with a number, are not
/// Flink's to change) and constant folding (which would cast a literal the Arrow way).
///
/// # Errors
/// An expression whose type cannot be resolved over `schema`.
pub(crate) fn flink_casts(
    e: Expr,
    schema: &DFSchema,
    type_of: &dyn Fn(&Expr) -> Option<DataType>,
) -> datafusion_common::Result<Expr> {
    let udf = Arc::new(ScalarUDF::new_from_impl(IntegralText {
        signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
    }));
    let read = |inner: Box<Expr>| -> datafusion_common::Result<Box<Expr>> {
        let inner = match inner.get_type(schema)? {
            DataType::Utf8 => *inner,
            _ => inner.cast_to(&DataType::Utf8, schema)?,
        };
        Ok(Box::new(Expr::ScalarFunction(ScalarFunction::new_udf(
            udf.clone(),
            vec![inner],
        ))))
    };
    // An argument whose type does not resolve yet is left to the planner's own checks.
    let text = |inner: &Expr| -> datafusion_common::Result<bool> {
        Ok(matches!(
            inner.get_type(schema),
            Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        ))
    };
    // The other casts whose rules are Flink's (`super::same_name`).
    let rule = |expr: Box<Expr>, field: &FieldRef, r#try: bool| -> Transformed<Expr> {
        let Some(from) = type_of(&expr) else {
            let e = *expr;
            return Transformed::no(rebuild(e, field.clone(), r#try));
        };
        match cast_rule(*expr, &from, field.data_type()) {
            CastRule::Arrow(e) => Transformed::no(rebuild(e, field.clone(), r#try)),
            CastRule::Input(e) => Transformed::yes(rebuild(e, field.clone(), r#try)),
            CastRule::Result(e) => Transformed::yes(e),
        }
    };
    e.transform_up(|e| {
        Ok(match e {
            Expr::Cast(Cast { expr, field }) if field.data_type().is_integer() && text(&expr)? => {
                Transformed::yes(Expr::Cast(Cast {
                    expr: read(expr)?,
                    field,
                }))
            }
            Expr::TryCast(TryCast { expr, field })
                if field.data_type().is_integer() && text(&expr)? =>
            {
                Transformed::yes(Expr::TryCast(TryCast {
                    expr: read(expr)?,
                    field,
                }))
            }
            Expr::Cast(Cast { expr, field }) => rule(expr, &field, false),
            Expr::TryCast(TryCast { expr, field }) => rule(expr, &field, true),
            e => Transformed::no(e),
        })
    })
    .map(|t| t.data)
}

fn rebuild(expr: Expr, field: FieldRef, r#try: bool) -> Expr {
    let expr = Box::new(expr);
    if r#try {
        Expr::TryCast(TryCast { expr, field })
    } else {
        Expr::Cast(Cast { expr, field })
    }
}

#[cfg(test)]
mod tests {
    use super::integral_text;

    #[test]
    fn integral_text_reads_as_flinks_cast() {
        for (text, want) in [
            ("3.5", Some("3")),
            ("-3.9", Some("-3")),
            (" 42 ", Some("42")),
            ("+7.", Some("7")),
            (".5", Some("0")),
            ("-.5", Some("-0")),
            ("12", Some("12")),
            ("", None),
            ("-", None),
            ("1e3", None),
            ("3.5x", None),
            ("3,5", None),
            ("\t3", None),
        ] {
            assert_eq!(integral_text(text).as_deref(), want, "{text:?}");
        }
    }
}
