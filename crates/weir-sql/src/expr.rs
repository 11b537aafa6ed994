//! Scalar expressions of SQL jobs, planned and evaluated by DataFusion.
//!
//! The planner resolves every name a user wrote (`o.amount`, a view column, an aggregate's
//! output) to a column of the stream it runs on and keeps the expression as SQL text over
//! those columns: a [`SqlScalar`]. That text is what the job graph stores. Planning it
//! ([`SqlScalar::plan`]) runs DataFusion's `SqlToRel` against the stream's schema, then
//! DataFusion's type coercion (implicit casts, DECIMAL precision and scale) and its physical
//! expression planner; the result evaluates on Arrow batches.
//!
//! Functions are DataFusion's scalar function library plus Flink's `TO_TIMESTAMP_LTZ`,
//! `DATE_FORMAT` (Java patterns, where DataFusion's alias takes chrono ones) and
//! `UNIX_TIMESTAMP`, which call weir-core's kernels so SQL and the Rust builder API agree, and
//! the Flink built-ins of [`crate::functions`] (TIMESTAMPADD, TO_TIMESTAMP, JSON_VALUE, ...).
//! Aggregate functions never reach DataFusion: the planner turns them into weir's window
//! aggregates and refers to their output columns.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, FieldRef, SchemaRef, TimeUnit};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{DFSchema, TableReference};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::simplify::SimplifyContext;
use datafusion_expr::{
    AggregateUDF, ColumnarValue, HigherOrderUDF, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, TableSource, Volatility, WindowUDF,
};
use datafusion_optimizer::simplify_expressions::ExprSimplifier;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_sql::planner::{ParserOptions, PlannerContext, SqlToRel};
use serde::{Deserialize, Serialize};
use sqlparser::parser::Parser;
use weir_core::expr::ScalarFunction;

use crate::dialect::FlinkDialect;
use crate::{Error, Result};

/// A scalar expression as SQL text over a stream's own column names (each backquoted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SqlScalar {
    sql: String,
}

impl SqlScalar {
    /// An expression from SQL text whose identifiers are the stream's column names.
    pub fn new(sql: impl Into<String>) -> SqlScalar {
        SqlScalar { sql: sql.into() }
    }

    /// A reference to column `name`.
    pub fn column(name: &str) -> SqlScalar {
        SqlScalar::new(quote_ident(name))
    }

    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The column this expression only passes through, if it is a bare column reference.
    pub fn as_column(&self) -> Option<String> {
        match parse_expr(&self.sql).ok()? {
            sqlparser::ast::Expr::Identifier(i) => Some(i.value),
            _ => None,
        }
    }

    /// This expression converted to `to` (Arrow's cast rules, through DataFusion's
    /// `arrow_cast`).
    pub fn cast(&self, to: &DataType) -> SqlScalar {
        SqlScalar::new(format!("arrow_cast({}, '{to}')", self.sql))
    }

    /// Plans the expression over `schema`: names, types and functions are checked here.
    ///
    /// # Errors
    /// `Plan` naming the expression and what DataFusion refused (an unknown function, two
    /// types that do not combine, ...).
    pub fn plan(&self, schema: &SchemaRef) -> Result<PlannedScalar> {
        self.try_plan(schema)
            .map_err(|m| Error::Plan(format!("`{}`: {m}", self.sql)))
    }

    /// The expression as DataFusion plans it over `schema`, implicit casts added (constants
    /// not folded yet), with the schema it is planned over: what [`try_plan`](Self::try_plan)
    /// simplifies and makes physical, for checks of the whole expression (crate::zone).
    fn logical(
        &self,
        schema: &SchemaRef,
    ) -> std::result::Result<(datafusion_expr::Expr, Arc<DFSchema>), String> {
        let fail = datafusion_message;
        // CURRENT_WATERMARK(rt) reads a column the Calc evaluating it adds (crate::calc).
        let extended;
        let schema = if self.sql.contains(crate::calc::CURRENT_WATERMARK)
            && schema.index_of(crate::calc::CURRENT_WATERMARK).is_err()
        {
            extended = crate::calc::with_current_watermark(schema);
            &extended
        } else {
            schema
        };
        let mut ast = parse_expr(&self.sql).map_err(|e| e.to_string())?;
        refuse_over_windows(&ast)?;
        crate::functions::prepare_all(&mut ast)?;
        let df_schema = DFSchema::try_from(schema.as_ref().clone()).map_err(fail)?;
        let provider = functions();
        let planner =
            SqlToRel::new_with_options(provider, ParserOptions::from(&provider.options.sql_parser));
        let logical = planner
            .sql_to_expr(ast, &df_schema, &mut PlannerContext::new())
            .map_err(fail)?;
        // Before coercion: only the casts the user wrote, not those coercion adds (text compared
        // with a number).
        let df_schema = Arc::new(df_schema);
        // A sub-expression's type once coerced (a CASE of an INT and a DECIMAL is a DECIMAL),
        // for the rewrites that pick Flink's rule by the type of what they take.
        let coerced_type = |e: &datafusion_expr::Expr| {
            let coerced = simplifier(&df_schema).coerce(e.clone(), &df_schema).ok()?;
            datafusion_expr::ExprSchemable::get_type(&coerced, df_schema.as_ref()).ok()
        };
        let logical = crate::functions::flink_functions(logical, &coerced_type).map_err(fail)?;
        let logical =
            crate::functions::flink_casts(logical, &df_schema, &coerced_type).map_err(fail)?;
        let logical = crate::functions::flink_division(logical, &df_schema).map_err(fail)?;
        // As DataFusion's own sessions do: implicit casts first.
        let coerced = simplifier(&df_schema)
            .coerce(logical, &df_schema)
            .map_err(fail)?;
        Ok((coerced, df_schema))
    }

    /// [`plan`](Self::plan), failing with DataFusion's reason alone, for callers that name
    /// the expression as the user wrote it.
    pub fn try_plan(&self, schema: &SchemaRef) -> std::result::Result<PlannedScalar, String> {
        self.try_plan_checked(schema, |_, _| Ok(()))
    }

    /// [`try_plan`](Self::try_plan), with `check` run on the expression as planned (implicit
    /// casts added, constants not folded yet) before it is made physical.
    pub(crate) fn try_plan_checked(
        &self,
        schema: &SchemaRef,
        check: impl FnOnce(&datafusion_expr::Expr, &DFSchema) -> std::result::Result<(), String>,
    ) -> std::result::Result<PlannedScalar, String> {
        let fail = datafusion_message;
        let (coerced, df_schema) = self.logical(schema)?;
        check(&coerced, &df_schema)?;
        // The rewrites DataFusion's physical planner relies on (`coalesce` to CASE,
        // `arrow_cast` to CAST, constant folding).
        let simplified = simplifier(&df_schema).simplify(coerced).map_err(fail)?;
        let physical = datafusion_physical_expr::create_physical_expr(
            &simplified,
            &df_schema,
            &ExecutionProps::new(),
            &PhysicalPlanningContext::default(),
        )
        .map_err(fail)?;
        let field = physical.return_field(df_schema.as_arrow()).map_err(fail)?;
        Ok(PlannedScalar {
            expr: physical,
            field,
            sql: self.sql.clone(),
        })
    }
}

fn simplifier(schema: &Arc<DFSchema>) -> ExprSimplifier {
    ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(schema.clone())
            .build(),
    )
}

impl std::fmt::Display for SqlScalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.sql)
    }
}

/// `name` as a backquoted identifier.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

pub(crate) fn parse_expr(sql: &str) -> Result<sqlparser::ast::Expr> {
    Parser::new(&FlinkDialect)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| Error::Plan(format!("`{sql}` does not parse: {e}")))
}

/// DataFusion's message without its error-kind prefix and backtrace hint.
/// OVER windows (ROW_NUMBER() for Top-N and deduplication, OVER aggregation) are not planned
/// yet: say so, instead of the expression planner's internal message.
fn refuse_over_windows(ast: &sqlparser::ast::Expr) -> std::result::Result<(), String> {
    use sqlparser::ast::{visit_expressions, Expr};
    use std::ops::ControlFlow;
    let found = visit_expressions(ast, |e| match e {
        Expr::Function(f) if f.over.is_some() => ControlFlow::Break(f.name.to_string()),
        _ => ControlFlow::Continue(()),
    });
    match found {
        ControlFlow::Break(name)
            if ["ROW_NUMBER", "RANK", "DENSE_RANK"].contains(&name.to_uppercase().as_str()) =>
        {
            Err(format!(
                "{name}() OVER (...) in a select list is not supported: weir ranks rows per \
                 window, in a subquery with the rank bounded outside it (window Top-N and \
                 deduplication): SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY \
                 window_start, window_end[, keys] ORDER BY x [DESC]) AS rownum FROM \
                 TABLE(TUMBLE(TABLE t, DESCRIPTOR(rt), INTERVAL ...))) r WHERE rownum <= N"
            ))
        }
        ControlFlow::Break(name) if name.eq_ignore_ascii_case("LEAD") => Err(
            "LEAD() OVER (...) is not supported: a row's LEAD is a row that has not come yet, so \
             a stream cannot emit it (Flink refuses it in streaming too); LAG() OVER (...) the \
             other way round gives the same pairs"
                .to_string(),
        ),
        ControlFlow::Break(name) => Err(format!(
            "{name}() OVER (...) is not supported here: weir takes the aggregates COUNT, SUM, \
             MIN, MAX, AVG, FIRST_VALUE, LAST_VALUE, LISTAGG, STDDEV and VAR over a window in \
             a select list (SELECT k, rt, SUM(x) OVER \
             (PARTITION BY k ORDER BY rt RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT \
             ROW) FROM t; not in WHERE or GROUP BY), LAG(x[, n[, default]]) OVER (PARTITION BY \
             k ORDER BY rt) alone in a select list, and ROW_NUMBER() in a window Top-N"
        )),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn datafusion_message(e: datafusion_common::DataFusionError) -> String {
    if let datafusion_common::DataFusionError::Internal(m) = e.find_root() {
        // Never an internal message alone: say what it means for the user.
        return format!(
            "weir cannot plan this expression (the expression planner failed: {})",
            m.lines().next().unwrap_or_default().trim_end_matches('.')
        );
    }
    let e = e.find_root().to_string();
    let e = e
        .strip_prefix("Error during planning: ")
        .or_else(|| e.strip_prefix("This feature is not implemented: "))
        .or_else(|| e.strip_prefix("Schema error: "))
        .unwrap_or(&e);
    let first = e.lines().next().unwrap_or_default();
    // DataFusion's "Invalid function 'mod'.": say it as for any unknown function, with the
    // nearest names weir has.
    if let Some(name) = first
        .strip_prefix("Invalid function '")
        .and_then(|r| r.split('\'').next())
    {
        return unknown_function(name);
    }
    first.to_string()
}

/// "unknown function `name`", the nearest name weir has, and what it has besides DataFusion's.
pub(crate) fn unknown_function(name: &str) -> String {
    let names = scalar_function_names();
    let hint = crate::plan::did_you_mean(&name.to_lowercase(), names.iter().map(String::as_str));
    format!(
        "unknown function `{name}`{hint}; weir has DataFusion's functions, Flink's \
         TO_TIMESTAMP_LTZ, TO_TIMESTAMP, DATE_FORMAT, UNIX_TIMESTAMP, FROM_UNIXTIME, \
         TIMESTAMPADD, TIMESTAMPDIFF, SPLIT_INDEX, SPLIT, REGEXP_EXTRACT, REGEXP, LOCATE, ELT, \
         JSON_VALUE, IF, MOD, SIGN, TRUNCATE, TO_BASE64, FROM_BASE64, HEX, UNHEX, BIN, IS_DIGIT, \
         IS_ALPHA, IS_DECIMAL, URL_ENCODE, URL_DECODE, E, MD5, SHA1, SHA2, SHA224 to SHA512, \
         PARSE_URL, FLOOR / CEIL(t TO unit), ARRAY[...], array[i], CARDINALITY, ELEMENT, \
         ARRAY_CONTAINS and ARRAY_JOIN, and the \
         aggregates COUNT, SUM, MIN, MAX, AVG, \
         APPROX_COUNT_DISTINCT, MEDIAN, STDDEV_POP, STDDEV_SAMP, STDDEV, VAR_POP, VAR_SAMP, \
         VARIANCE, FIRST_VALUE, LAST_VALUE, LISTAGG (and LISTAGG(DISTINCT x))"
    )
}

/// A planned expression, ready to evaluate on batches of the schema it was planned for.
#[derive(Debug, Clone)]
pub struct PlannedScalar {
    expr: Arc<dyn PhysicalExpr>,
    field: FieldRef,
    /// The expression as planned, for errors.
    sql: String,
}

impl PlannedScalar {
    /// The result's type.
    pub fn data_type(&self) -> &DataType {
        self.field.data_type()
    }

    /// Whether the result may be NULL.
    pub fn nullable(&self) -> bool {
        self.field.is_nullable()
    }

    /// The expression's value for every row of `batch`.
    ///
    /// # Errors
    /// What DataFusion raises while evaluating (a division by zero, a failed cast).
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        self.expr
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(|e| {
                Error::Plan(format!(
                    "evaluating `{}`: {}",
                    self.sql,
                    datafusion_message(e)
                ))
            })
    }
}

/// The functions SQL expressions may call: DataFusion's, with Flink's on top.
struct Functions {
    scalars: HashMap<String, Arc<ScalarUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
    options: ConfigOptions,
}

fn functions() -> &'static Functions {
    static FUNCTIONS: OnceLock<Functions> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let mut scalars = HashMap::new();
        let flink = [
            ScalarFunction::ToTimestampLtz,
            ScalarFunction::DateFormat,
            ScalarFunction::UnixTimestamp,
        ]
        .map(|f| Arc::new(ScalarUDF::new_from_impl(FlinkFunction::new(f))));
        let flink_if = Arc::new(ScalarUDF::new_from_impl(IfFunction {
            signature: Signature::user_defined(Volatility::Immutable),
        }));
        for udf in datafusion_functions::all_default_functions()
            .into_iter()
            .chain(flink)
            .chain([flink_if])
            .chain(crate::functions::udfs())
            .chain(crate::zone::ZoneFunction::udfs())
        {
            for name in std::iter::once(udf.name()).chain(udf.aliases().iter().map(|a| a.as_str()))
            {
                scalars.insert(name.to_ascii_lowercase(), udf.clone());
            }
        }
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
            Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
            Arc::new(crate::functions::ArrayPlanner),
        ];
        let mut options = ConfigOptions::default();
        // Flink's types: STRING is Utf8 (what weir's connectors and keys use), and a literal
        // with a decimal point is a DECIMAL.
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.parse_float_as_decimal = true;
        Functions {
            scalars,
            planners,
            options,
        }
    })
}

/// The names (and aliases) of every scalar function, lower case.
pub fn scalar_function_names() -> Vec<String> {
    let mut names: Vec<String> = functions().scalars.keys().cloned().collect();
    names.sort();
    names
}

/// Whether DataFusion's library or weir has a scalar function of this name.
pub fn is_scalar_function(name: &str) -> bool {
    functions().scalars.contains_key(&name.to_ascii_lowercase())
}

impl ContextProvider for Functions {
    fn get_table_source(
        &self,
        name: TableReference,
    ) -> datafusion_common::Result<Arc<dyn TableSource>> {
        datafusion_common::plan_err!(
            "table `{name}` inside an expression: subqueries are not supported"
        )
    }
    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.planners
    }
    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.scalars.get(&name.to_ascii_lowercase()).cloned()
    }
    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }
    fn get_aggregate_meta(&self, _name: &str) -> Option<Arc<AggregateUDF>> {
        None
    }
    fn get_window_meta(&self, _name: &str) -> Option<Arc<WindowUDF>> {
        None
    }
    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }
    fn options(&self) -> &ConfigOptions {
        &self.options
    }
    fn udf_names(&self) -> Vec<String> {
        self.scalars.keys().cloned().collect()
    }
    fn udaf_names(&self) -> Vec<String> {
        Vec::new()
    }
    fn udwf_names(&self) -> Vec<String> {
        Vec::new()
    }
    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A Flink built-in as a DataFusion function over weir-core's kernel.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FlinkFunction {
    function: ScalarFunction,
    name: String,
    signature: Signature,
}

impl FlinkFunction {
    fn new(function: ScalarFunction) -> FlinkFunction {
        FlinkFunction {
            function,
            name: function.name().to_ascii_lowercase(),
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for FlinkFunction {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        let want: &[&str] = match self.function {
            ScalarFunction::ToTimestampLtz => &["BIGINT epoch", "INT precision (0 or 3)"],
            ScalarFunction::DateFormat => &["TIMESTAMP or STRING", "STRING pattern"],
            ScalarFunction::UnixTimestamp => &["STRING 'yyyy-MM-dd HH:mm:ss'", "STRING pattern"],
        };
        let usage = || format!("{}({})", self.function.name(), want.join(", "));
        // UNIX_TIMESTAMP's pattern may be left out.
        let fits = arg_types.len() == want.len()
            || (self.function == ScalarFunction::UnixTimestamp && arg_types.len() == 1);
        if !fits {
            return datafusion_common::plan_err!(
                "{} takes {} arguments, got {}: {}",
                self.function.name(),
                want.len(),
                arg_types.len(),
                usage()
            );
        }
        let bad = |i: usize| {
            datafusion_common::plan_err!(
                "{} argument {} is {}; expected {}",
                self.function.name(),
                i + 1,
                arg_types[i],
                usage()
            )
        };
        let int = |t: &DataType| t.is_integer() || t.is_null();
        let text = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            )
        };
        match self.function {
            ScalarFunction::ToTimestampLtz => {
                // Flink takes any number; a DOUBLE's fraction of a millisecond is cut.
                if !(int(&arg_types[0])
                    || matches!(
                        arg_types[0],
                        DataType::Decimal128(..) | DataType::Float64 | DataType::Float32
                    ))
                {
                    return bad(0);
                }
                if !int(&arg_types[1]) {
                    return bad(1);
                }
                Ok(vec![DataType::Int64, DataType::Int64])
            }
            ScalarFunction::DateFormat => {
                let first = match &arg_types[0] {
                    t @ DataType::Timestamp(_, _) => t.clone(),
                    DataType::Int64 | DataType::Null => {
                        DataType::Timestamp(TimeUnit::Millisecond, None)
                    }
                    // Read as Flink reads it, in invoke_with_args.
                    t if text(t) => DataType::Utf8,
                    _ => return bad(0),
                };
                if !text(&arg_types[1]) {
                    return bad(1);
                }
                Ok(vec![first, DataType::Utf8])
            }
            ScalarFunction::UnixTimestamp => {
                if let Some(i) = (0..arg_types.len()).find(|&i| !text(&arg_types[i])) {
                    return bad(i);
                }
                Ok(vec![DataType::Utf8; arg_types.len()])
            }
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(match self.function {
            ScalarFunction::ToTimestampLtz => {
                DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
            }
            ScalarFunction::DateFormat => DataType::Utf8,
            ScalarFunction::UnixTimestamp => DataType::Int64,
        })
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        crate::functions::on_arrays(&args, |mut arrays| {
            if self.function == ScalarFunction::DateFormat
                && arrays[0].data_type() == &DataType::Utf8
            {
                arrays[0] = crate::functions::date_format_text(&arrays[0]);
            }
            if self.function == ScalarFunction::UnixTimestamp {
                return match arrays.get(1) {
                    None => Ok(crate::functions::unix_timestamp_text(&arrays[0])),
                    Some(p) => crate::functions::unix_timestamp_pattern(&arrays[0], p)
                        .map_err(datafusion_common::DataFusionError::Execution),
                };
            }
            self.function
                .invoke(&arrays)
                .map_err(|e| datafusion_common::DataFusionError::Execution(e.to_string()))
        })
    }
}

/// Flink's `IF(condition, then, else)` (a NULL condition takes `else`, as CASE WHEN does). The
/// simplifier turns it into CASE, so only the branch a row takes is evaluated:
/// `IF(qty = 0, 0, amount / qty)` never divides by zero.
#[derive(Debug, PartialEq, Eq, Hash)]
struct IfFunction {
    signature: Signature,
}

impl ScalarUDFImpl for IfFunction {
    fn name(&self) -> &str {
        "if"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        let [condition, then, otherwise] = arg_types else {
            return datafusion_common::plan_err!(
                "IF takes 3 arguments (condition, then, else), got {}",
                arg_types.len()
            );
        };
        if !matches!(condition, DataType::Boolean | DataType::Null) {
            return datafusion_common::plan_err!(
                "IF's condition is {condition}; it must be BOOLEAN"
            );
        }
        match datafusion_expr::type_coercion::binary::type_union_resolution(&[
            then.clone(),
            otherwise.clone(),
        ]) {
            Some(t) => Ok(vec![DataType::Boolean, t.clone(), t]),
            None => datafusion_common::plan_err!(
                "IF's two results are {then} and {otherwise}, which have no common type"
            ),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(arg_types[1].clone())
    }

    fn simplify(
        &self,
        args: Vec<datafusion_expr::Expr>,
        _info: &SimplifyContext,
    ) -> datafusion_common::Result<datafusion_expr::simplify::ExprSimplifyResult> {
        let Ok([condition, then, otherwise]) = <[datafusion_expr::Expr; 3]>::try_from(args) else {
            return datafusion_common::plan_err!("IF takes 3 arguments (condition, then, else)");
        };
        Ok(datafusion_expr::simplify::ExprSimplifyResult::Simplified(
            datafusion_expr::Expr::Case(datafusion_expr::expr::Case {
                expr: None,
                when_then_expr: vec![(Box::new(condition), Box::new(then))],
                else_expr: Some(Box::new(otherwise)),
            }),
        ))
    }

    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        // SqlScalar::plan always simplifies, which turns every IF into CASE.
        datafusion_common::internal_err!("IF runs as CASE; it is rewritten by the simplifier")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Decimal128Array, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("ts", DataType::Int64, false),
            Field::new("amount", DataType::Decimal128(12, 2), true),
            Field::new("rate", DataType::Decimal128(12, 6), true),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![60_000, 61_500])),
                Arc::new(
                    Decimal128Array::from(vec![Some(1050), None])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
                Arc::new(
                    Decimal128Array::from(vec![Some(1_100_000), Some(2)])
                        .with_precision_and_scale(12, 6)
                        .unwrap(),
                ),
                Arc::new(StringArray::from(vec![Some("Ada"), None])),
            ],
        )
        .unwrap()
    }

    fn eval(sql: &str) -> (DataType, Vec<String>) {
        let b = batch();
        let p = SqlScalar::new(sql).plan(&b.schema()).unwrap();
        let a = p.evaluate(&b).unwrap();
        let f =
            arrow_cast::display::ArrayFormatter::try_new(a.as_ref(), &Default::default()).unwrap();
        (
            p.data_type().clone(),
            (0..a.len()).map(|i| f.value(i).to_string()).collect(),
        )
    }

    #[test]
    fn decimal_product_keeps_every_digit() {
        let (t, v) = eval("`amount` * `rate`");
        assert_eq!(t, DataType::Decimal128(25, 8));
        assert_eq!(v, ["11.55000000", ""]);
    }

    #[test]
    fn flink_time_functions_agree_with_weir_core() {
        let (t, v) = eval(
            "UNIX_TIMESTAMP(DATE_FORMAT(TO_TIMESTAMP_LTZ(`ts`, 3), 'yyyy-MM-dd HH:mm:ss')) * 1000",
        );
        assert_eq!(t, DataType::Int64);
        assert_eq!(v, ["60000", "61000"]);
    }

    #[test]
    fn datafusion_functions_are_there() {
        let (_, v) = eval("upper(coalesce(`name`, 'nobody')) || '-' || CAST(`ts` % 7 AS VARCHAR)");
        assert_eq!(v, ["ADA-3", "NOBODY-5"]);
        let (_, v) = eval("CASE WHEN `ts` > 61000 THEN 'late' ELSE 'early' END");
        assert_eq!(v, ["early", "late"]);
        let (t, v) = eval("IF(`ts` > 61000, `ts`, 0) + IF(`name` = 'Ada', 1, 2)");
        assert_eq!((t, v), (DataType::Int64, vec!["1".into(), "61502".into()]));
        // Only the branch a row takes is evaluated: the second row never divides by zero.
        let (_, v) = eval("IF(`ts` > 61000, -1, `ts` / (`ts` - 61500))");
        assert_eq!(v, ["-40", "-1"]);
        let (_, v) = eval("`name` LIKE 'A%' OR `ts` IN (61500, 7)");
        assert_eq!(v, ["true", "true"]);
        let (_, v) = eval("regexp_like(substr(`name`, 2), '^d') AND round(abs(-1.6)) = 2");
        assert_eq!(v, ["true", ""]);
        let (_, v) = eval("date_trunc('minute', TO_TIMESTAMP_LTZ(`ts`, 3) + INTERVAL '30' SECOND)");
        assert_eq!(v, ["1970-01-01T00:01:00Z", "1970-01-01T00:01:00Z"]);
    }

    #[test]
    fn flink_type_names_cast() {
        let (t, v) = eval("CAST(`ts` AS STRING) || CAST(CAST('1.5' AS DECIMAL(10, 2)) AS VARCHAR)");
        assert_eq!((t, v[0].as_str()), (DataType::Utf8, "600001.50"));
        let (t, v) = eval("`amount` * 1.1");
        assert_eq!((t, v[0].as_str()), (DataType::Decimal128(15, 3), "11.550"));
        let (t, _) = eval("CAST(`ts` AS INT)");
        assert_eq!(t, DataType::Int32);
        let (t, _) = eval("CAST(`amount` AS DOUBLE) + CAST(`ts` AS BIGINT)");
        assert_eq!(t, DataType::Float64);
    }

    #[test]
    fn an_evaluation_error_names_the_expression_as_written() {
        let b = batch();
        let p = SqlScalar::new("`ts` / (`ts` - 61500)")
            .plan(&b.schema())
            .unwrap();
        let err = p.evaluate(&b).unwrap_err().to_string();
        assert!(
            err.contains("`ts` / (`ts` - 61500)") && err.contains("zero"),
            "{err}"
        );
    }

    #[test]
    fn a_type_error_names_both_types() {
        let b = batch();
        let err = SqlScalar::new("`name` - `ts`")
            .plan(&b.schema())
            .unwrap_err()
            .to_string();
        assert!(err.contains("Utf8") && err.contains("Int64"), "{err}");
    }

    #[test]
    fn cast_and_column_round_trip() {
        let c = SqlScalar::column("we`ird");
        assert_eq!(c.as_column().as_deref(), Some("we`ird"));
        let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()));
        let (t, _) = eval(SqlScalar::column("ts").cast(&ts).sql());
        assert_eq!(t, ts);
    }
}
