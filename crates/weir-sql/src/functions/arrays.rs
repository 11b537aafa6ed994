//! Flink's array functions: `ARRAY[a, b, ...]` (DataFusion's `make_array`, the elements in a
//! type all of them take), `array[i]` (1-based; NULL past the end, a failed row for an index
//! below 1, as Flink fails its job), `CARDINALITY(array)` (an INT), `ELEMENT(array)` (the one
//! element, NULL for an empty array, a failed row for more), `ARRAY_CONTAINS(array, x)` (TRUE
//! for a NULL `x` when the array holds a NULL, as Flink's) and `ARRAY_JOIN(array, sep[,
//! null text])` (DataFusion's `array_to_string`: NULL elements left out unless the third
//! argument replaces them, as Flink's). Checked against Flink 2.3 by `testdata/flink/scalars`.
//! [`ArrayPlanner`] plans the `ARRAY[...]` and `x[i]` syntax; DataFusion's other array
//! functions are not registered (their rules are not Flink's).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, BooleanArray, Int32Array, ListArray, UInt64Array};
use arrow_schema::DataType;
use datafusion_common::{exec_err, plan_err, DFSchema, Result};
use datafusion_expr::expr::ScalarFunction;
use datafusion_expr::planner::{ExprPlanner, PlannerResult, RawFieldAccessExpr};
use datafusion_expr::{
    ColumnarValue, Expr, GetFieldAccess, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

/// One of the functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `array[i]`.
    At,
    Element,
    Contains,
    Cardinality,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::At => "array_element",
            Kind::Element => "element",
            Kind::Contains => "array_contains",
            Kind::Cardinality => "cardinality",
        }
    }

    fn usage(self) -> &'static str {
        match self {
            Kind::At => "array[INT index], the first element at 1",
            Kind::Element => "ELEMENT(ARRAY of one element)",
            Kind::Contains => "ARRAY_CONTAINS(ARRAY, value of its elements' type)",
            Kind::Cardinality => "CARDINALITY(ARRAY)",
        }
    }
}

/// The functions of this module, for the registry.
pub(crate) fn udfs() -> Vec<Arc<ScalarUDF>> {
    [Kind::At, Kind::Element, Kind::Contains, Kind::Cardinality]
        .map(udf)
        .into_iter()
        .chain([datafusion_functions_nested::string::array_to_string_udf()])
        .collect()
}

fn udf(kind: Kind) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(ArrayFn {
        kind,
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

/// Plans `ARRAY[...]` (DataFusion's `make_array`) and `x[i]` (Flink's element access); the
/// other forms DataFusion's nested planners take (`||` of arrays, `@>`, MAP[...], slices,
/// `x['field']`) stay unplanned, so they are refused.
#[derive(Debug)]
pub(crate) struct ArrayPlanner;

impl ExprPlanner for ArrayPlanner {
    fn plan_array_literal(
        &self,
        exprs: Vec<Expr>,
        _schema: &DFSchema,
    ) -> Result<PlannerResult<Vec<Expr>>> {
        if exprs.is_empty() {
            return plan_err!("ARRAY[] without elements is not supported: give it one at least");
        }
        Ok(PlannerResult::Planned(
            datafusion_functions_nested::make_array::make_array(exprs),
        ))
    }

    fn plan_field_access(
        &self,
        expr: RawFieldAccessExpr,
        _schema: &DFSchema,
    ) -> Result<PlannerResult<RawFieldAccessExpr>> {
        match expr.field_access {
            GetFieldAccess::ListIndex { key } => Ok(PlannerResult::Planned(Expr::ScalarFunction(
                ScalarFunction::new_udf(udf(Kind::At), vec![expr.expr, *key]),
            ))),
            _ => Ok(PlannerResult::Original(expr)),
        }
    }
}

/// One element per row: `at(row, length)` gives its place in the row's array (from 0), or
/// None for NULL; a NULL array is NULL.
fn pick(
    lists: &ListArray,
    mut at: impl FnMut(usize, usize) -> Result<Option<usize>>,
) -> Result<ArrayRef> {
    let mut picked = Vec::with_capacity(lists.len());
    for row in 0..lists.len() {
        let start = lists.value_offsets()[row] as usize;
        picked.push(match lists.is_null(row) {
            true => None,
            false => at(row, lists.value_length(row) as usize)?.map(|p| (start + p) as u64),
        });
    }
    Ok(arrow_select::take::take(
        lists.values(),
        &UInt64Array::from(picked),
        None,
    )?)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ArrayFn {
    kind: Kind,
    signature: Signature,
}

/// The element type of an array type.
fn element(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) => Some(f.data_type()),
        _ => None,
    }
}

impl ScalarUDFImpl for ArrayFn {
    fn name(&self) -> &str {
        self.kind.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, given: &[DataType]) -> Result<Vec<DataType>> {
        let int = |t: &DataType| t.is_integer() || t.is_null();
        let fits = match (self.kind, given) {
            (Kind::At, [a, i]) if element(a).is_some() && int(i) => {
                Some(vec![a.clone(), DataType::Int64])
            }
            (Kind::Element | Kind::Cardinality, [a]) if element(a).is_some() => {
                Some(vec![a.clone()])
            }
            (Kind::Contains, [a, x]) => match element(a) {
                Some(e) if x.is_null() || arrow_cast::can_cast_types(x, e) => {
                    Some(vec![a.clone(), e.clone()])
                }
                _ => None,
            },
            _ => None,
        };
        match fits {
            Some(t) => Ok(t),
            None => plan_err!(
                "{} takes {}, not ({})",
                self.kind.name().to_uppercase(),
                self.kind.usage(),
                given
                    .iter()
                    .map(crate::zone::sql_name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::At | Kind::Element => match args.first().and_then(element) {
                Some(e) => e.clone(),
                None => return plan_err!("{} takes {}", self.kind.name(), self.kind.usage()),
            },
            Kind::Contains => DataType::Boolean,
            Kind::Cardinality => DataType::Int32,
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let lists = arrays[0].as_list::<i32>();
        let out: ArrayRef = match self.kind {
            Kind::At => {
                let index = arrays[1].as_primitive::<Int64Type>();
                pick(lists, |row, len| {
                    if index.is_null(row) {
                        return Ok(None);
                    }
                    match index.value(row) {
                        i if i < 1 => exec_err!(
                            "array index {i} is out of range: the first element is at 1 (Flink \
                             fails the job)"
                        ),
                        i => Ok((i <= len as i64).then(|| i as usize - 1)),
                    }
                })?
            }
            Kind::Element => pick(lists, |_, len| match len {
                0 => Ok(None),
                1 => Ok(Some(0)),
                n => exec_err!(
                    "ELEMENT of an array of {n} elements: it takes an array of one element \
                     (Flink fails the job)"
                ),
            })?,
            Kind::Cardinality => {
                Arc::new(Int32Array::from_iter((0..lists.len()).map(|row| {
                    (!lists.is_null(row)).then(|| lists.value_length(row))
                })))
            }
            Kind::Contains => {
                let needles = &arrays[1];
                let mut out = Vec::with_capacity(lists.len());
                for row in 0..lists.len() {
                    if lists.is_null(row) {
                        out.push(None);
                        continue;
                    }
                    let held = lists.value(row);
                    out.push(Some(if needles.is_null(row) {
                        held.null_count() > 0
                    } else {
                        let needle = arrow_array::Scalar::new(needles.slice(row, 1));
                        arrow_ord::cmp::eq(&held, &needle)?.true_count() > 0
                    }));
                }
                Arc::new(BooleanArray::from(out))
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}
