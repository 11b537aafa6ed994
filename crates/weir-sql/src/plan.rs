//! Plans a job file into a weir job graph.
//!
//! Supported shapes, each a `INSERT INTO sink SELECT ...`:
//! - projections and filters over one table;
//! - an interval join: `JOIN ... ON` key equalities and a time condition bounding the two
//!   sides' time attributes (`c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND`, or `>=` and
//!   `<=` pairs); without a time bound the join is a regular join, refused unless
//!   `SET 'table.exec.state.ttl'` gives a TTL;
//! - a temporal join: `JOIN t FOR SYSTEM_TIME AS OF x.rt AS a ON` key equalities;
//! - several joins in one FROM, left to right; the joined rows carry one time attribute (see
//!   `Rel::time_columns`);
//! - a window aggregation: `FROM TABLE(TUMBLE|HOP|SESSION(TABLE t, DESCRIPTOR(rt), ...))` with
//!   `GROUP BY keys, window_start, window_end` and COUNT(*), SUM, MIN, MAX, AVG,
//!   APPROX_COUNT_DISTINCT, MEDIAN.
//!
//! Names in expressions are resolved here to the columns of the stream they run on; the
//! expressions themselves are planned by DataFusion ([`crate::expr`]) and run in
//! [`Calc`] operators.
//!
//! Anything else is refused with what weir does support.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_schema::{DataType, TimeUnit};
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, DateTimeField, Expr as SqlExpr, FunctionArg, FunctionArgExpr,
    FunctionArguments, GroupByExpr, Ident, Insert, JoinConstraint, JoinOperator, ObjectName, Query,
    Select, SelectItem, SetExpr, Statement, TableFactor, TableObject, TableVersion, VisitMut,
    VisitorMut,
};
use weir_core::watermark::WatermarkStrategy;
use weir_operators::aggregates::{self, Aggregate};
use weir_operators::join::join_schema;
use weir_operators::{
    AggStrategy, AggregateExt, GroupAggregate, GroupAggregateExt, IntervalJoin, IntervalJoinExt,
    JoinType, RegularJoin, RegularJoinExt, TemporalJoin, TemporalJoinExt, WindowAggregate,
};
use weir_runtime::graph::WatermarkAlignment;
use weir_runtime::{JobBuilder, JobConfig, JobGraph, SourceOptions, Stream};

use crate::calc::Calc;
use crate::connectors::{self, is_upsert, primary_key_columns, OP_COLUMN};
use crate::dialect::TABLE_ARG;
use crate::expr::SqlScalar;
use crate::parse::{parse_job, substitute, ColumnDef, JobStatement, TableDef};
use crate::{Error, Result};

/// Settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// `${name}` substitutions.
    pub vars: BTreeMap<String, String>,
    /// Overrides `SET 'parallelism.default'`.
    pub parallelism: Option<usize>,
}

pub(crate) fn plan_err(m: impl Into<String>) -> Error {
    Error::Plan(m.into())
}

/// Plans the job file `sql`.
///
/// # Errors
/// Syntax errors with line and column; unknown tables and columns with the nearest name;
/// unbounded joins and unsupported shapes with what to write instead.
pub fn plan_job(sql: &str, opts: &PlanOptions) -> Result<JobGraph> {
    // Planning recurses along expressions (up to `parse::MAX_EXPRESSION_DEPTH` deep, in
    // sqlparser and DataFusion): on a thread of its own with a stack that takes it, whatever
    // the caller's stack is.
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("weir-sql-plan".into())
            .stack_size(PLANNING_STACK_BYTES)
            .spawn_scoped(s, || plan_job_here(sql, opts))
            .map_err(|e| plan_err(format!("cannot start the planning thread: {e}")))?
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The planning thread's stack: deep expressions take about 1 KiB a level in optimised
/// builds and several times that in debug builds.
const PLANNING_STACK_BYTES: usize = 256 << 20;

fn plan_job_here(sql: &str, opts: &PlanOptions) -> Result<JobGraph> {
    let sql = substitute(sql, &opts.vars)?;
    let statements = parse_job(&sql)?;
    let mut tables: HashMap<String, TableDef> = HashMap::new();
    let mut settings: BTreeMap<String, String> = BTreeMap::new();
    let mut inserts: Vec<Insert> = Vec::new();
    let mut views: HashMap<String, (String, Query)> = HashMap::new();
    for st in statements {
        match st {
            JobStatement::CreateTable(t) => {
                tables.insert(t.name.to_lowercase(), *t);
            }
            JobStatement::Other(s) => match *s {
                Statement::Set(set) => {
                    if let sqlparser::ast::Set::SingleAssignment { variable, values, .. } = set {
                        let key = unquote(&variable.to_string());
                        let value = values.first().map(|v| unquote(&v.to_string())).unwrap_or_default();
                        settings.insert(key, value);
                    }
                }
                Statement::Insert(i) => inserts.push(i),
                Statement::CreateView(v) => {
                    let name = unquote(&v.name.to_string());
                    views.insert(name.to_lowercase(), (name, *v.query));
                }
                other => {
                    return Err(plan_err(format!(
                        "weir runs CREATE TABLE, SET and INSERT INTO ... SELECT statements; this one is not supported: {}",
                        first_line(&other.to_string())
                    )))
                }
            },
        }
    }
    if inserts.is_empty() {
        return Err(plan_err(
            "the job has no INSERT INTO statement, so nothing would run",
        ));
    }
    check_settings(&settings)?;
    let parallelism = match opts.parallelism {
        Some(p) => p,
        None => match settings.get("parallelism.default") {
            Some(v) => v.parse().map_err(|_| {
                plan_err(format!("SET 'parallelism.default' = '{v}': not a number"))
            })?,
            None => 1,
        },
    };
    let max_dead_letter_share = match settings.get("weir.max-dead-letter-share") {
        Some(v) => Some(v.parse::<f64>().map_err(|_| {
            plan_err(format!(
                "SET 'weir.max-dead-letter-share' = '{v}': not a number (a share from 0 to 1)"
            ))
        })?),
        None => None,
    };
    let checkpointing = match settings.get("execution.checkpointing.interval") {
        Some(v) => {
            let mut c = weir_runtime::checkpoint::CheckpointConfig::new(
                duration_ms("execution.checkpointing.interval", v)?,
                settings
                    .get("execution.checkpointing.dir")
                    .or_else(|| settings.get("state.checkpoints.dir"))
                    .map_or("weir-checkpoints", String::as_str),
            );
            c.restart = restart_strategy(&settings)?;
            if let Some(n) = settings.get("state.checkpoints.num-retained") {
                c.keep = n.parse().map_err(|_| {
                    plan_err(format!(
                        "SET 'state.checkpoints.num-retained' = '{n}': not a number"
                    ))
                })?;
            }
            Some(c)
        }
        None => None,
    };
    let job = JobBuilder::with_config(
        "sql job",
        JobConfig {
            parallelism,
            max_dead_letter_share,
            checkpointing,
            ..Default::default()
        },
    );
    let planner = Planner {
        tables,
        views,
        settings,
        job: job.clone(),
        late_rows: RefCell::default(),
        late_routed: RefCell::default(),
    };
    let mut made_by = Vec::new();
    for ins in &inserts {
        let before = job.node_count();
        planner.insert(ins)?;
        made_by.push((
            before..job.node_count(),
            format!(
                "INSERT INTO {} (statement {} of the job)",
                first_line(&ins.table.to_string()),
                made_by.len() + 1
            ),
        ));
    }
    let before = job.node_count();
    let late_tables = planner.sink_late_rows()?;
    if !late_tables.is_empty() {
        made_by.push((
            before..job.node_count(),
            format!(
                "the late rows sent to {} ('{}')",
                late_tables.join(", "),
                connectors::LATE_ROWS
            ),
        ));
    }
    let mut graph = job.build()?;
    // Nodes point at the statement that made them, not at the planner's source.
    for (range, made) in made_by {
        for id in range {
            graph.nodes[id].created_at = made.clone();
        }
    }
    Ok(graph)
}

/// The `SET` keys weir reads.
const SETTINGS: &[&str] = &[
    "parallelism.default",
    "table.exec.state.ttl",
    "table.optimizer.agg-phase-strategy",
    "weir.aggregation.salts",
    "weir.aggregation.hot-key-share",
    "weir.window.max-windows-per-row",
    "weir.max-dead-letter-share",
    "scan.watermark.idle-timeout",
    "scan.watermark.alignment.group",
    "scan.watermark.alignment.max-drift",
    "scan.watermark.alignment.update-interval",
    "scan.watermark.alignment.buffer-size",
    "pipeline.watermark-alignment.allow-unaligned-source-splits",
    "execution.checkpointing.interval",
    "execution.checkpointing.dir",
    "state.checkpoints.dir",
    "state.checkpoints.num-retained",
    "restart-strategy.type",
    "restart-strategy.fixed-delay.attempts",
    "restart-strategy.fixed-delay.delay",
    "restart-strategy.exponential-delay.initial-backoff",
    "restart-strategy.exponential-delay.max-backoff",
    "restart-strategy.exponential-delay.backoff-multiplier",
    "restart-strategy.exponential-delay.attempts",
];

/// Refuses a `SET` key weir does not read that is a misspelling of one it does (or any
/// unknown `weir.` key): it would be ignored without a word. Other keys (Flink settings a job
/// carries, such as `execution.runtime-mode`) are ignored with a warning.
fn check_settings(settings: &BTreeMap<String, String>) -> Result<()> {
    for key in settings.keys() {
        if SETTINGS.contains(&key.as_str()) {
            continue;
        }
        let nearest = SETTINGS
            .iter()
            .map(|k| (distance(key, k), *k))
            .min_by_key(|x| x.0);
        let hint = did_you_mean(key, SETTINGS.iter().copied());
        if key.starts_with("weir.") || nearest.is_some_and(|(d, _)| d <= 2) {
            return Err(plan_err(format!(
                "SET '{key}': not a setting weir reads{hint}"
            )));
        }
        tracing::warn!(key = %key, "SET '{key}' is not a setting weir reads; ignored");
    }
    Ok(())
}

/// Flink's `restart-strategy.*` settings (the default when none is given).
fn restart_strategy(
    settings: &BTreeMap<String, String>,
) -> Result<weir_runtime::checkpoint::RestartStrategy> {
    use weir_runtime::checkpoint::RestartStrategy;
    let number = |key: &str, default: u32| -> Result<u32> {
        settings.get(key).map_or(Ok(default), |v| {
            v.trim()
                .parse()
                .map_err(|_| plan_err(format!("SET '{key}' = '{v}': a whole number")))
        })
    };
    let duration = |key: &str, default: u64| -> Result<u64> {
        settings.get(key).map_or(Ok(default), |v| {
            duration_ms(key, v).map(|ms| ms.max(0) as u64)
        })
    };
    match settings.get("restart-strategy.type").map(|s| s.to_lowercase()) {
        None => Ok(RestartStrategy::default()),
        Some(t) if t == "none" || t == "disable" || t == "off" => Ok(RestartStrategy::None),
        Some(t) if t == "fixed-delay" || t == "fixeddelay" => Ok(RestartStrategy::FixedDelay {
            attempts: number("restart-strategy.fixed-delay.attempts", 3)?,
            delay_ms: duration("restart-strategy.fixed-delay.delay", 1_000)?,
        }),
        Some(t) if t == "exponential-delay" => {
            Ok(RestartStrategy::ExponentialDelay {
                initial_ms: duration("restart-strategy.exponential-delay.initial-backoff", 1_000)?,
                max_ms: duration("restart-strategy.exponential-delay.max-backoff", 60_000)?,
                multiplier: match settings.get("restart-strategy.exponential-delay.backoff-multiplier") {
                    Some(v) => v.trim().parse().map_err(|_| {
                        plan_err(format!(
                            "SET 'restart-strategy.exponential-delay.backoff-multiplier' = '{v}': a number"
                        ))
                    })?,
                    None => 2.0,
                },
                attempts: number("restart-strategy.exponential-delay.attempts", 10)?,
            })
        }
        Some(other) => Err(plan_err(format!(
            "SET 'restart-strategy.type' = '{other}': use 'none', 'fixed-delay' or 'exponential-delay'"
        ))),
    }
}

/// An error of an operator the planner built, told in terms of the SQL statement: the Rust
/// source line the builder recorded means nothing to a SQL user.
fn in_statement(message: &str, sink: &str) -> String {
    match (message.find(" (created at "), message.find("): ")) {
        (Some(i), Some(j)) if j > i => format!(
            "{} (in INSERT INTO {sink}){}",
            &message[..i],
            &message[j + 1..]
        ),
        _ => message.to_string(),
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(80)
        .collect()
}

fn unquote(s: &str) -> String {
    s.trim()
        .trim_matches('\'')
        .trim_matches('"')
        .trim_matches('`')
        .to_string()
}

/// Edit distance, for "did you mean" hints.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (
        a.to_lowercase().chars().collect(),
        b.to_lowercase().chars().collect(),
    );
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

pub(crate) fn did_you_mean<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    // A name that starts the same way wins over a merely close one (`ad` → `ad_id`).
    let lower = name.to_lowercase();
    let best = candidates
        .map(|c| {
            let prefix = !lower.is_empty() && c.to_lowercase().starts_with(&lower);
            (if prefix { 0 } else { distance(name, c) }, c)
        })
        .min_by_key(|x| x.0);
    match best {
        Some((d, c)) if d <= 3 => format!("; did you mean `{c}`?"),
        _ => String::new(),
    }
}

/// A table's physical columns (those read or written) with their Arrow types, in order.
pub(crate) fn physical_columns(t: &TableDef) -> Result<Vec<(String, DataType)>> {
    t.columns
        .iter()
        .filter_map(|c| match c {
            ColumnDef::Physical { name, data_type } => {
                Some(arrow_type(data_type).map(|d| (name.clone(), d)))
            }
            ColumnDef::Computed { .. } => None,
        })
        .collect()
}

/// The SQL type of a column as an Arrow type.
fn arrow_type(t: &sqlparser::ast::DataType) -> Result<DataType> {
    use sqlparser::ast::DataType as S;
    use sqlparser::ast::ExactNumberInfo as E;
    Ok(match t {
        S::BigInt(_) | S::Int8(_) | S::Int64 => DataType::Int64,
        S::Int(_) | S::Integer(_) | S::Int4(_) | S::Int32 => DataType::Int32,
        S::Double(_) | S::DoublePrecision | S::Float64 => DataType::Float64,
        S::Float(_) | S::Real | S::Float32 => DataType::Float32,
        S::Boolean | S::Bool => DataType::Boolean,
        S::String(_) | S::Varchar(_) | S::Text | S::Char(_) | S::CharacterVarying(_) => DataType::Utf8,
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => match info {
            E::PrecisionAndScale(p, s) => DataType::Decimal128(*p as u8, *s as i8),
            E::Precision(p) => DataType::Decimal128(*p as u8, 0),
            E::None => DataType::Decimal128(10, 0),
        },
        S::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Millisecond, None),
        S::Custom(name, _) if name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ") => {
            DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
        }
        other => return Err(plan_err(format!("column type {other} is not supported yet; use BIGINT, INT, DOUBLE, FLOAT, BOOLEAN, STRING, DECIMAL(p, s) or TIMESTAMP(3)"))),
    })
}

/// `INTERVAL '5' SECOND` (and friends) in milliseconds.
fn interval_ms(e: &SqlExpr) -> Result<i64> {
    let SqlExpr::Interval(iv) = e else {
        return Err(plan_err(format!("expected an INTERVAL, found `{e}`")));
    };
    let n: f64 = unquote(&iv.value.to_string())
        .parse()
        .map_err(|_| plan_err(format!("`{e}`: the interval's value is not a number")))?;
    let unit = match &iv.leading_field {
        Some(DateTimeField::Millisecond) | Some(DateTimeField::Milliseconds) => 1.0,
        Some(DateTimeField::Second) | Some(DateTimeField::Seconds) | None => 1_000.0,
        Some(DateTimeField::Minute) | Some(DateTimeField::Minutes) => 60_000.0,
        Some(DateTimeField::Hour) | Some(DateTimeField::Hours) => 3_600_000.0,
        Some(DateTimeField::Day) | Some(DateTimeField::Days) => 86_400_000.0,
        Some(other) => {
            return Err(plan_err(format!(
                "`{e}`: interval unit {other} is not supported"
            )))
        }
    };
    Ok((n * unit) as i64)
}

/// A duration setting such as `5 s`, `100 ms`, `1 min`.
fn duration_ms(key: &str, v: &str) -> Result<i64> {
    let v = v.trim();
    let (num, unit) = v.split_at(
        v.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(v.len()),
    );
    let n: f64 = num.parse().map_err(|_| {
        plan_err(format!(
            "setting `{key}` = '{v}': expected a duration such as '5 s'"
        ))
    })?;
    let f = match unit.trim().to_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" => 1.0,
        "s" | "sec" | "second" | "seconds" => 1_000.0,
        "min" | "minute" | "minutes" => 60_000.0,
        "h" | "hour" | "hours" => 3_600_000.0,
        "d" | "day" | "days" => 86_400_000.0,
        other => {
            return Err(plan_err(format!(
                "setting `{key}` = '{v}': unknown unit `{other}`"
            )))
        }
    };
    Ok((n * f) as i64)
}

/// A column reachable by a name in a query: `qualifier.name` is `column` of the stream.
#[derive(Debug, Clone)]
struct ScopeEntry {
    qualifier: Option<String>,
    name: String,
    column: String,
}

/// A relation being planned: a stream and the names that reach its columns.
#[derive(Clone)]
struct Rel {
    stream: Stream,
    scope: Vec<ScopeEntry>,
    /// The stream's columns that carry its event time: the event-time column and its
    /// TIMESTAMP twins (the WATERMARK column and what it stands for). A name that resolves to
    /// one of them is a time attribute.
    time_columns: Vec<String>,
    /// Names of processing-time attributes (`name AS PROCTIME()`): joining `FOR SYSTEM_TIME AS
    /// OF` one is a lookup join.
    proc_time_attrs: Vec<String>,
    /// The stream columns of the table's PRIMARY KEY (a versioned table's key).
    primary_key: Vec<String>,
    /// For the updates of a GROUP BY without a window: the columns that key them (a later row
    /// of a key replaces the earlier one).
    upsert_keys: Option<Vec<String>>,
    alias: String,
}

impl Rel {
    fn resolve(&self, qualifier: Option<&str>, name: &str) -> Result<String> {
        let hits: Vec<&ScopeEntry> = self
            .scope
            .iter()
            .filter(|e| e.name.eq_ignore_ascii_case(name))
            .filter(|e| {
                qualifier.is_none_or(|q| {
                    e.qualifier
                        .as_deref()
                        .is_some_and(|x| x.eq_ignore_ascii_case(q))
                })
            })
            .collect();
        match hits.as_slice() {
            [one] => Ok(one.column.clone()),
            [] => {
                let full = match qualifier {
                    Some(q) => format!("{q}.{name}"),
                    None => name.to_string(),
                };
                Err(plan_err(format!(
                    "unknown column `{full}`{}; columns here: {}",
                    did_you_mean(name, self.scope.iter().map(|e| e.name.as_str())),
                    self.scope
                        .iter()
                        .map(|e| match &e.qualifier {
                            Some(q) => format!("{q}.{}", e.name),
                            None => e.name.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
            many => {
                if many.windows(2).all(|w| w[0].column == w[1].column) {
                    Ok(many[0].column.clone())
                } else {
                    Err(plan_err(format!(
                        "column `{name}` is ambiguous: qualify it with a table alias"
                    )))
                }
            }
        }
    }

    /// Whether `e` names this relation's time attribute.
    fn is_time_attr(&self, e: &SqlExpr) -> bool {
        let column = match e {
            SqlExpr::Identifier(i) => self.resolve(None, &i.value),
            SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
                self.resolve(Some(&p[0].value), &p[1].value)
            }
            _ => return false,
        };
        column.is_ok_and(|c| self.time_columns.contains(&c))
    }

    /// The names a user may write for the time attribute, for messages.
    fn time_attr_names(&self) -> String {
        let names: Vec<String> = (self.scope.iter())
            .filter(|e| self.time_columns.contains(&e.column))
            .map(|e| match &e.qualifier {
                Some(q) => format!("{q}.{}", e.name),
                None => e.name.clone(),
            })
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

struct Planner {
    tables: HashMap<String, TableDef>,
    /// Views by lower-case name: (name, query). Each use plans the query again.
    views: HashMap<String, (String, Query)>,
    settings: BTreeMap<String, String>,
    job: JobBuilder,
    /// Late rows of sources with 'weir.late-rows', by the lower-case name of the table they go
    /// to: (its name, the rows of each source read, already in that table's columns).
    late_rows: RefCell<BTreeMap<String, (String, Vec<Stream>)>>,
    /// Source tables (lower case) whose late rows are routed already.
    late_routed: RefCell<std::collections::BTreeSet<String>>,
}

impl Planner {
    /// Sends a source's late rows (`stream`, the source table `t`'s rows set aside by
    /// `drop_late`) toward the table its 'weir.late-rows' option names, by column name.
    fn route_late_rows(&self, t: &TableDef, late_table: &str, stream: Stream) -> Result<()> {
        let target = self.table(&ObjectName::from(vec![Ident::new(late_table)]))?;
        let schema = stream.schema();
        let mut cols = Vec::new();
        for (name, ty) in physical_columns(target)? {
            let Some(field) = schema
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(&name))
            else {
                return Err(plan_err(format!(
                    "table `{}`: '{}' = '{late_table}', but `{late_table}` has a column `{name}` that `{}` does not ({}); the late-row table takes columns of the source table by name",
                    t.name,
                    connectors::LATE_ROWS,
                    t.name,
                    schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
                )));
            };
            let e = SqlScalar::column(field.name());
            cols.push((
                name,
                if field.data_type() == &ty {
                    e
                } else {
                    e.cast(&ty)
                },
            ));
        }
        let rows = stream.apply("calc", Arc::new(Calc::project(cols)));
        self.late_rows
            .borrow_mut()
            .entry(target.name.to_lowercase())
            .or_insert_with(|| (target.name.clone(), Vec::new()))
            .1
            .push(rows);
        Ok(())
    }

    /// One sink per late-row table, fed by every source read that sends it rows. Returns the
    /// sinks' table names.
    fn sink_late_rows(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for (key, (name, streams)) in self.late_rows.borrow().iter() {
            let t = &self.tables[key];
            let (factory, parallelism) = connectors::sink_factory(t)?;
            let rows = match streams.as_slice() {
                [one] => one.clone(),
                [first, rest @ ..] => first.union(rest),
                [] => continue,
            };
            rows.sink_arc(name.clone(), factory, parallelism);
            names.push(name.clone());
        }
        Ok(names)
    }

    fn table(&self, name: &ObjectName) -> Result<&TableDef> {
        let n = unquote(&name.to_string());
        self.tables.get(&n.to_lowercase()).ok_or_else(|| {
            plan_err(format!(
                "unknown table `{n}`{}; tables: {}",
                did_you_mean(&n, self.tables.values().map(|t| t.name.as_str())),
                {
                    let mut names: Vec<String> =
                        self.tables.values().map(|t| t.name.clone()).collect();
                    names.sort();
                    names.join(", ")
                }
            ))
        })
    }

    fn setting(&self, key: &str, table: &TableDef) -> Option<String> {
        table
            .options
            .get(key)
            .or_else(|| self.settings.get(key))
            .cloned()
    }

    /// A table as a source relation: physical columns read, computed columns added.
    fn source(&self, t: &TableDef, alias: &str) -> Result<Rel> {
        let physical = physical_columns(t)?;
        // Event time: the WATERMARK column, or the physical column a computed one converts.
        let (mut opts, time_columns) = match &t.watermark {
            None => (SourceOptions::none(), Vec::new()),
            Some((wcol, wexpr)) => {
                let strategy = match wexpr {
                    SqlExpr::BinaryOp { left, op: BinaryOperator::Minus, right } if is_ident(left, wcol) => {
                        WatermarkStrategy::bounded(interval_ms(right)?)
                    }
                    e if is_ident(e, wcol) => WatermarkStrategy::Monotonous,
                    other => {
                        return Err(plan_err(format!(
                            "table `{}`: WATERMARK FOR {wcol} AS {other}: weir takes `{wcol} - INTERVAL 'n' SECOND` or `{wcol}`",
                            t.name
                        )))
                    }
                };
                let physical_col = match t.columns.iter().find(|c| col_name(c).eq_ignore_ascii_case(wcol)) {
                    Some(ColumnDef::Physical { name, .. }) => name.clone(),
                    Some(ColumnDef::Computed { expr, .. }) => match expr.as_ref() {
                        SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case("TO_TIMESTAMP_LTZ") => {
                            let args = function_args(&f.args)?;
                            match (args.first(), args.get(1)) {
                                (Some(SqlExpr::Identifier(i)), Some(p)) if p.to_string() == "3" => i.value.clone(),
                                _ => return Err(plan_err(format!("table `{}`: the time attribute `{wcol}` must be TO_TIMESTAMP_LTZ(column, 3)", t.name))),
                            }
                        }
                        other => return Err(plan_err(format!("table `{}`: the time attribute `{wcol}` = {other}: weir takes a BIGINT epoch-ms or TIMESTAMP column, or TO_TIMESTAMP_LTZ(column, 3)", t.name))),
                    },
                    None => return Err(plan_err(format!("table `{}`: WATERMARK FOR `{wcol}`, which is not a column", t.name))),
                };
                let mut attrs = vec![table_column(t, wcol)];
                if !physical_col.eq_ignore_ascii_case(wcol) {
                    attrs.push(table_column(t, &physical_col));
                }
                (
                    SourceOptions::event_time(&physical_col, 0).strategy(strategy),
                    attrs,
                )
            }
        };
        if let Some(v) = self.setting("scan.watermark.idle-timeout", t) {
            opts = opts.idle_timeout_ms(duration_ms("scan.watermark.idle-timeout", &v)?);
        }
        if let Some(group) = self.setting("scan.watermark.alignment.group", t) {
            let drift = self
                .setting("scan.watermark.alignment.max-drift", t)
                .ok_or_else(|| {
                    plan_err(format!(
                        "table `{}`: an alignment group needs 'scan.watermark.alignment.max-drift'",
                        t.name
                    ))
                })?;
            let mut al = WatermarkAlignment::new(
                &group,
                duration_ms("scan.watermark.alignment.max-drift", &drift)?,
            );
            if let Some(u) = self.setting("scan.watermark.alignment.update-interval", t) {
                al.update_interval_ms =
                    duration_ms("scan.watermark.alignment.update-interval", &u)?;
            }
            if let Some(b) = self.setting("scan.watermark.alignment.buffer-size", t) {
                al.buffer_size = b.parse().map_err(|_| {
                    plan_err(format!(
                        "'scan.watermark.alignment.buffer-size' = '{b}': not a number"
                    ))
                })?;
            }
            let key = "pipeline.watermark-alignment.allow-unaligned-source-splits";
            al.allow_unaligned_source_splits =
                connectors::parse_bool(&t.name, key, self.setting(key, t).as_deref())?
                    .unwrap_or(false);
            opts = opts.aligned(al);
        }
        let proc_attrs: Vec<String> = t
            .columns
            .iter()
            .filter_map(|c| match c {
                ColumnDef::Computed { name, expr } if is_proctime(expr) => Some(name.clone()),
                _ => None,
            })
            .collect();
        let event_time_column = opts.watermarks.event_time.clone();
        let factory = connectors::source_factory(t, &physical, event_time_column.as_deref())?;
        let mut stream = self.job.source_arc(t.name.clone(), factory, opts);
        if let Some(late_table) = t.options.get(connectors::LATE_ROWS) {
            if event_time_column.is_none() {
                return Err(plan_err(format!(
                    "table `{}`: '{}' needs a WATERMARK: rows are late by their event time",
                    t.name,
                    connectors::LATE_ROWS
                )));
            }
            // Late at the source is late everywhere after it: rows behind their split's
            // watermark go to the table instead of into the query.
            stream = stream.drop_late();
            // The same rows are late in every read of the table: one read sends them.
            if self.late_routed.borrow_mut().insert(t.name.to_lowercase()) {
                self.route_late_rows(t, late_table, stream.late_rows())?;
            }
        }
        // Physical columns, then computed ones.
        let base = Rel {
            primary_key: t.primary_key.iter().map(|k| table_column(t, k)).collect(),
            upsert_keys: None,
            proc_time_attrs: proc_attrs.clone(),
            stream: stream.clone(),
            scope: physical
                .iter()
                .map(|(n, _)| ScopeEntry {
                    qualifier: Some(alias.to_string()),
                    name: n.clone(),
                    column: n.clone(),
                })
                .collect(),
            time_columns: time_columns.clone(),
            alias: alias.to_string(),
        };
        let computed: Vec<(String, SqlScalar)> = t
            .columns
            .iter()
            .filter_map(|c| match c {
                ColumnDef::Computed { name, expr } if !is_proctime(expr) => {
                    Some(scalar(expr, &base).map(|e| (name.clone(), e)))
                }
                _ => None,
            })
            .collect::<Result<_>>()?;
        if computed.is_empty() {
            return Ok(base);
        }
        let mut cols: Vec<(String, SqlScalar)> = (physical.iter())
            .map(|(n, _)| (n.clone(), SqlScalar::column(n)))
            .collect();
        if is_upsert(t) {
            cols.push((OP_COLUMN.into(), SqlScalar::column(OP_COLUMN)));
        }
        cols.extend(computed.iter().cloned());
        let mut scope = base.scope.clone();
        scope.extend(computed.iter().map(|(n, _)| ScopeEntry {
            qualifier: Some(alias.to_string()),
            name: n.clone(),
            column: n.clone(),
        }));
        Ok(Rel {
            primary_key: t.primary_key.iter().map(|k| table_column(t, k)).collect(),
            upsert_keys: None,
            proc_time_attrs: proc_attrs,
            stream: stream.apply("calc", Arc::new(Calc::project(cols))),
            scope,
            time_columns,
            alias: alias.to_string(),
        })
    }

    fn insert(&self, ins: &Insert) -> Result<()> {
        let TableObject::TableName(name) = &ins.table else {
            return Err(plan_err("INSERT INTO a table function is not supported"));
        };
        let sink = self.table(name)?;
        let query = ins
            .source
            .as_ref()
            .ok_or_else(|| plan_err("INSERT without a SELECT"))?;
        let planned = self.query(query);
        // An operator refused while building explains more than what fails after it.
        if let Some(first) = self.job.pending_error() {
            return Err(plan_err(in_statement(&first, &sink.name)));
        }
        let (rel, exprs) = planned?;
        let sink_cols = physical_columns(sink)?;
        if sink_cols.len() != exprs.len() {
            return Err(plan_err(format!(
                "INSERT INTO `{}`: the SELECT has {} columns, the table {} ({})",
                sink.name,
                exprs.len(),
                sink_cols.len(),
                sink_cols
                    .iter()
                    .map(|c| c.0.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if let Some(keys) = &rel.upsert_keys {
            check_upsert_sink(sink, &sink_cols, &exprs, keys)?;
        }
        // Columns by position, cast to the sink's types (as Flink does).
        let schema = rel.stream.schema();
        let mut out = Vec::new();
        for ((name, t), e) in sink_cols.iter().zip(exprs) {
            let planned = e.plan(&schema)?;
            let same = planned.data_type() == t;
            out.push((name.clone(), if same { e } else { e.cast(t) }));
        }
        let (factory, parallelism) = connectors::sink_factory(sink)?;
        let rows = rel.stream.apply("calc", Arc::new(Calc::project(out)));
        if is_upsert(sink) {
            // A key's updates must reach the topic in order: one sink subtask per key.
            let pk = primary_key_columns(sink, "each record is keyed by it")?;
            rows.key_by(&pk)
                .sink_arc(sink.name.clone(), factory, parallelism);
        } else {
            rows.sink_arc(sink.name.clone(), factory, parallelism);
        }
        Ok(())
    }

    /// Plans a SELECT: the relation and the output expressions over it.
    fn query(&self, q: &Query) -> Result<(Rel, Vec<SqlScalar>)> {
        let SetExpr::Select(select) = q.body.as_ref() else {
            return Err(plan_err(
                "weir plans a plain SELECT (no UNION, VALUES or nested queries yet)",
            ));
        };
        let select: &Select = select;
        if select.distinct.is_some()
            || q.order_by.is_some()
            || q.limit_clause.is_some()
            || q.fetch.is_some()
            || q.with.is_some()
        {
            return Err(plan_err(
                "SELECT DISTINCT, ORDER BY, LIMIT, FETCH and WITH are not supported in a streaming query yet; use GROUP BY for distinct rows and views for WITH",
            ));
        }
        if select.from.len() != 1 {
            return Err(plan_err("weir plans a SELECT over one FROM item (a table, a join or a window table function)"));
        }
        let from = &select.from[0];
        let (mut rel, window) = match &from.relation {
            TableFactor::TableFunction { expr, alias } => {
                let (rel, w) = self.window_tvf(expr)?;
                let _ = alias;
                (rel, Some(w))
            }
            other => (self.table_factor(other)?.0, None),
        };
        for j in &from.joins {
            rel = self.join(rel, j)?;
        }
        if rel.upsert_keys.is_some()
            && (window.is_some() || select.selection.is_some() || !from.joins.is_empty())
        {
            return Err(plan_err(
                    "the rows of a GROUP BY without a window update their key's result: weir writes them to an upsert sink, but does not window, filter or join them yet",
                ));
        }
        if let Some(w) = &select.selection {
            let pred = scalar(w, &rel)?;
            rel.stream = rel.stream.apply("calc", Arc::new(Calc::filter(pred)));
        }
        let grouped = match &select.group_by {
            GroupByExpr::Expressions(es, _) => !es.is_empty(),
            GroupByExpr::All(_) => true,
        };
        match (window, grouped) {
            (Some(w), true) => self.window_aggregate(rel, w, select),
            (Some(_), false) => Err(plan_err(
                "a window table function needs GROUP BY ..., window_start, window_end",
            )),
            (None, true) => self.group_aggregate(rel, select),
            (None, false) => {
                let exprs = select_exprs(select, &rel, None)?;
                Ok((rel, exprs))
            }
        }
    }

    /// `SET 'table.exec.state.ttl'`, if given.
    fn state_ttl_ms(&self) -> Result<Option<i64>> {
        (self.settings.get("table.exec.state.ttl"))
            .map(|v| duration_ms("table.exec.state.ttl", v))
            .transpose()
    }

    /// A view or table by name (`versioned`: read as a temporal join's versioned table).
    fn named(&self, name: &ObjectName, alias: Option<String>, versioned: bool) -> Result<Rel> {
        let key = unquote(&name.to_string()).to_lowercase();
        if let Some((view_name, q)) = self.views.get(&key) {
            return self.view(q, &alias.unwrap_or_else(|| view_name.clone()));
        }
        let t = self.table(name)?;
        if is_upsert(t) && !versioned {
            return Err(plan_err(format!(
                "table `{}` ('upsert-kafka') is a changelog: weir reads it as the versioned table of a temporal join (JOIN {} FOR SYSTEM_TIME AS OF x.rt AS ...)",
                t.name, t.name
            )));
        }
        self.source(t, &alias.unwrap_or_else(|| t.name.clone()))
    }

    fn table_factor(&self, f: &TableFactor) -> Result<(Rel, Option<SqlExpr>)> {
        match f {
            TableFactor::Table {
                name,
                alias,
                version,
                ..
            } => {
                let version = match version {
                    Some(TableVersion::ForSystemTimeAsOf(e)) => Some(e.clone()),
                    Some(other) => {
                        return Err(plan_err(format!(
                            "`{other}` is not supported; use FOR SYSTEM_TIME AS OF"
                        )))
                    }
                    None => None,
                };
                let alias = alias.as_ref().map(|a| a.name.value.clone());
                Ok((self.named(name, alias, version.is_some())?, version))
            }
            // A subquery in FROM is an unnamed view.
            TableFactor::Derived {
                subquery, alias, ..
            } => {
                let alias = alias
                    .as_ref()
                    .map(|a| a.name.value.clone())
                    .ok_or_else(|| plan_err(format!("FROM ({subquery}): name the subquery with AS")))?;
                Ok((self.view(subquery, &alias)?, None))
            }
            other => Err(plan_err(format!(
                "FROM {other}: weir reads tables, views, subqueries, joins and window table functions"
            ))),
        }
    }

    /// A view used in FROM: its query, planned, as a relation whose columns are the select
    /// list's names. The time attribute survives when the view selects it.
    fn view(&self, q: &Query, alias: &str) -> Result<Rel> {
        let (rel, exprs) = self.query(q)?;
        let SetExpr::Select(select) = q.body.as_ref() else {
            return Err(plan_err("a view is a plain SELECT"));
        };
        let mut cols: Vec<(String, SqlScalar)> = Vec::new();
        let mut time_columns = Vec::new();
        // The output names, in the order of `exprs` (a `*` stands for every column in scope).
        let mut names: Vec<String> = Vec::new();
        for item in &select.projection {
            match item {
                SelectItem::ExprWithAlias { alias, .. } => names.push(alias.value.clone()),
                SelectItem::UnnamedExpr(x) => {
                    names.push(ident_name(x).unwrap_or_else(|| x.to_string()))
                }
                SelectItem::Wildcard(_) => names.extend(rel.scope.iter().map(|e| e.name.clone())),
                other => {
                    return Err(plan_err(format!(
                        "view select item `{other}`: name it with AS"
                    )))
                }
            }
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].iter().any(|m| m.eq_ignore_ascii_case(n)) {
                return Err(plan_err(format!(
                    "`{alias}` has two columns named `{n}`: rename one with AS"
                )));
            }
        }
        for (name, e) in names.into_iter().zip(exprs) {
            if e.as_column().is_some_and(|c| rel.time_columns.contains(&c)) {
                time_columns.push(name.clone());
            }
            cols.push((name, e));
        }
        // Keep the stream's event time even when the view selects only its TIMESTAMP twin.
        if let Some(et) = rel.stream.event_time() {
            if !cols
                .iter()
                .any(|(_, e)| e.as_column().as_ref() == Some(&et))
            {
                cols.push(("__event_time".into(), SqlScalar::column(&et)));
                time_columns.push("__event_time".into());
            }
        }
        let upsert_keys = match &rel.upsert_keys {
            Some(keys) => {
                let mut named = Vec::new();
                for k in keys {
                    let out = cols.iter().find(|(_, e)| e.as_column().as_ref() == Some(k));
                    match out {
                        Some((n, _)) => named.push(n.clone()),
                        None => {
                            return Err(plan_err(format!(
                                "view `{alias}` over a GROUP BY without a window must select its group keys as they are (missing `{k}`): its rows update their key's result"
                            )))
                        }
                    }
                }
                Some(named)
            }
            None => None,
        };
        let scope = cols
            .iter()
            .filter(|(n, _)| n != "__event_time")
            .map(|(n, _)| ScopeEntry {
                qualifier: Some(alias.to_string()),
                name: n.clone(),
                column: n.clone(),
            })
            .collect();
        Ok(Rel {
            primary_key: Vec::new(),
            upsert_keys,
            proc_time_attrs: Vec::new(),
            stream: rel.stream.apply("calc", Arc::new(Calc::project(cols))),
            scope,
            time_columns,
            alias: alias.to_string(),
        })
    }

    fn join(&self, left: Rel, j: &sqlparser::ast::Join) -> Result<Rel> {
        let (right, version) = self.table_factor(&j.relation)?;
        if left.upsert_keys.is_some() || right.upsert_keys.is_some() {
            return Err(plan_err(
                "joining the rows of a GROUP BY without a window (updates per key) is not supported yet",
            ));
        }
        let (jt, on) = match &j.join_operator {
            JoinOperator::Join(JoinConstraint::On(e))
            | JoinOperator::Inner(JoinConstraint::On(e)) => (JoinType::Inner, e),
            JoinOperator::Left(JoinConstraint::On(e))
            | JoinOperator::LeftOuter(JoinConstraint::On(e)) => (JoinType::Left, e),
            JoinOperator::Right(JoinConstraint::On(e))
            | JoinOperator::RightOuter(JoinConstraint::On(e)) => (JoinType::Right, e),
            JoinOperator::FullOuter(JoinConstraint::On(e)) => (JoinType::Full, e),
            other => {
                return Err(plan_err(format!(
                    "join `{other:?}` is not supported; use [LEFT|RIGHT|FULL] JOIN ... ON"
                )))
            }
        };
        let mut conjuncts = Vec::new();
        split_and(on, &mut conjuncts);
        let (mut lkeys, mut rkeys, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        for c in conjuncts {
            if let SqlExpr::BinaryOp {
                left: a,
                op: BinaryOperator::Eq,
                right: b,
            } = c
            {
                let sides = (side_of(a, &left, &right), side_of(b, &left, &right));
                match sides {
                    (Some((0, x)), Some((1, y))) => {
                        lkeys.push(x);
                        rkeys.push(y);
                        continue;
                    }
                    (Some((1, y)), Some((0, x))) => {
                        lkeys.push(x);
                        rkeys.push(y);
                        continue;
                    }
                    _ => {}
                }
            }
            rest.push(c.clone());
        }
        if lkeys.is_empty() {
            return Err(plan_err(format!(
                "join ON {on}: weir needs at least one key equality between the two sides"
            )));
        }
        let aliases = (left.alias.clone(), right.alias.clone());
        let (stream, lschema, rschema) = (
            left.stream.clone(),
            left.stream.schema(),
            right.stream.schema(),
        );
        let lookup = version.as_ref().is_some_and(|v| {
            ident_name(v).is_some_and(|n| {
                left.proc_time_attrs
                    .iter()
                    .any(|p| p.eq_ignore_ascii_case(&n))
            })
        });
        let out = if lookup {
            if !rest.is_empty() {
                return Err(plan_err(format!(
                    "lookup join: only key equalities are supported in ON, not `{}`",
                    rest[0]
                )));
            }
            let t = weir_operators::StreamTableJoin::new()
                .join_type(jt)
                .aliases(&aliases.0, &aliases.1);
            use weir_operators::StreamTableJoinExt;
            stream
                .key_by(&lkeys)
                .stream_table_join(&right.stream.key_by(&rkeys), t)
        } else if let Some(v) = &version {
            if !left.is_time_attr(v) {
                return Err(plan_err(format!(
                    "FOR SYSTEM_TIME AS OF {v}: a temporal join looks versions up at the probe side's time attribute ({}), or at a PROCTIME() attribute for a lookup join",
                    left.time_attr_names()
                )));
            }
            if !rest.is_empty() {
                return Err(plan_err(format!(
                    "temporal join: only key equalities are supported in ON, not `{}`",
                    rest[0]
                )));
            }
            // The versions are keyed by the PRIMARY KEY: ON equates exactly it (another
            // equality would look versions up per a different key).
            let pk_ok = right.primary_key.is_empty()
                || (right.primary_key.iter().all(|k| rkeys.contains(k))
                    && rkeys.iter().all(|k| right.primary_key.contains(k)));
            if !pk_ok {
                return Err(plan_err(format!(
                    "temporal join with `{}`: its PRIMARY KEY ({}) keys the versions, so ON must equate exactly it; ON equates ({}). Filter on other columns after the join",
                    right.alias,
                    right.primary_key.join(", "),
                    rkeys.join(", ")
                )));
            }
            let mut t = TemporalJoin::new()
                .join_type(jt)
                .aliases(&aliases.0, &aliases.1);
            // An upsert-kafka table's rows say which are deletes.
            if right.stream.schema().index_of(OP_COLUMN).is_ok() {
                t = t.op_column(OP_COLUMN);
            }
            stream
                .key_by(&lkeys)
                .temporal_join(&right.stream.key_by(&rkeys), t)
        } else {
            match time_bounds(&rest, &left, &right)? {
                Some((lower, upper)) => {
                    let j = IntervalJoin::between(lower, upper)
                        .join_type(jt)
                        .aliases(&aliases.0, &aliases.1);
                    stream
                        .key_by(&lkeys)
                        .interval_join(&right.stream.key_by(&rkeys), j)
                }
                None => {
                    let ttl = self.state_ttl_ms()?;
                    let j = RegularJoin {
                        ttl_ms: ttl,
                        ..RegularJoin::unbounded()
                    }
                    .join_type(jt)
                    .aliases(&aliases.0, &aliases.1);
                    stream
                        .key_by(&lkeys)
                        .regular_join(&right.stream.key_by(&rkeys), j)
                }
            }
        };
        let (_, lnames, rnames) =
            join_schema(&lschema, &rschema, (&aliases.0, &aliases.1)).map_err(Error::Runtime)?;
        let rename =
            |rel: &Rel, names: &[String], schema: &arrow_schema::SchemaRef| -> Vec<ScopeEntry> {
                rel.scope
                    .iter()
                    .map(|e| {
                        let idx = schema.index_of(&e.column).unwrap_or(0);
                        ScopeEntry {
                            qualifier: e.qualifier.clone(),
                            name: e.name.clone(),
                            column: names[idx].clone(),
                        }
                    })
                    .collect()
            };
        let mut scope = rename(&left, &lnames, &lschema);
        scope.extend(rename(&right, &rnames, &rschema));
        // The joined rows' time attribute: that of the side whose event time the join's
        // output carries (none when an outer join may leave it NULL).
        let mapped = |rel: &Rel, names: &[String], schema: &arrow_schema::SchemaRef| {
            (rel.time_columns.iter())
                .filter_map(|c| schema.index_of(c).ok().map(|i| names[i].clone()))
                .collect::<Vec<_>>()
        };
        let time_columns = match out.event_time() {
            Some(et) => [
                mapped(&left, &lnames, &lschema),
                mapped(&right, &rnames, &rschema),
            ]
            .into_iter()
            .find(|cols| cols.contains(&et))
            .unwrap_or_else(|| vec![et]),
            None => Vec::new(),
        };
        Ok(Rel {
            primary_key: Vec::new(),
            upsert_keys: None,
            proc_time_attrs: {
                let mut p = left.proc_time_attrs.clone();
                p.extend(right.proc_time_attrs.clone());
                p
            },
            stream: out,
            scope,
            time_columns,
            alias: format!("{}_{}", aliases.0, aliases.1),
        })
    }

    fn window_tvf(&self, e: &SqlExpr) -> Result<(Rel, WindowAggregate)> {
        let SqlExpr::Function(f) = e else {
            return Err(plan_err(format!(
                "FROM TABLE({e}): expected TUMBLE, HOP or SESSION"
            )));
        };
        let args = function_args(&f.args)?;
        let table = match args.first() {
            Some(SqlExpr::CompoundIdentifier(p)) if p.len() == 2 && p[0].value == TABLE_ARG => {
                p[1].value.clone()
            }
            _ => {
                return Err(plan_err(format!(
                    "{}: the first argument is TABLE <name>",
                    f.name
                )))
            }
        };
        let rel = self.named(&ObjectName::from(vec![Ident::new(&table)]), None, false)?;
        let descriptor = match args.get(1) {
            Some(SqlExpr::Function(d)) if d.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") => {
                function_args(&d.args)?
            }
            _ => {
                return Err(plan_err(format!(
                    "{}: the second argument is DESCRIPTOR(<time attribute>)",
                    f.name
                )))
            }
        };
        // Windows are in the stream's event time: the descriptor must name it.
        match descriptor.as_slice() {
            [c] if rel.is_time_attr(c) => {}
            _ => {
                return Err(plan_err(format!(
                    "{}: DESCRIPTOR({}) must name the table's time attribute: {}",
                    f.name,
                    descriptor
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    rel.time_attr_names()
                )))
            }
        }
        let iv = |i: usize| {
            args.get(i)
                .ok_or_else(|| plan_err(format!("{}: missing interval argument {}", f.name, i + 1)))
                .and_then(interval_ms)
        };
        let w = match f.name.to_string().to_uppercase().as_str() {
            "TUMBLE" => WindowAggregate::tumbling(iv(2)?),
            // Flink: HOP(TABLE t, DESCRIPTOR(rt), slide, size).
            "HOP" => {
                let mut w = WindowAggregate::hopping(iv(3)?, iv(2)?);
                if let Some(v) = self.settings.get("weir.window.max-windows-per-row") {
                    w = w.max_windows_per_row(v.parse().map_err(|_| {
                        plan_err(format!(
                            "SET 'weir.window.max-windows-per-row' = '{v}': not a number"
                        ))
                    })?);
                }
                w
            }
            "SESSION" => WindowAggregate::session(iv(2)?),
            other => {
                return Err(plan_err(format!(
                    "window table function {other} is not supported; use TUMBLE, HOP or SESSION"
                )))
            }
        };
        Ok((rel, w))
    }

    /// A GROUP BY without a window: a continuous aggregation whose rows update their key's
    /// result, with the state TTL bounding its keys.
    fn group_aggregate(&self, rel: Rel, select: &Select) -> Result<(Rel, Vec<SqlScalar>)> {
        let Some(ttl) = self.state_ttl_ms()? else {
            return Err(plan_err(
                "GROUP BY without a window keeps a group per key for ever: set 'table.exec.state.ttl' (a key is forgotten that long after its last row, in event time) and write to an 'upsert-kafka' table, or aggregate in event-time windows: FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(rt), INTERVAL ...))",
            ));
        };
        if rel.upsert_keys.is_some() {
            return Err(plan_err(
                "aggregating the rows of a GROUP BY without a window again is not supported: they are updates, not events",
            ));
        }
        let (rel, keys, aggs) = grouping(rel, select, false)?;
        let mut g = GroupAggregate::with_ttl(ttl);
        for (_, a) in &aggs {
            g = g.aggregate(a.clone());
        }
        let stream = rel.stream.key_by(&keys).group_aggregate(g);
        let scope = (rel.scope.iter())
            .filter(|e| keys.contains(&e.column))
            .cloned()
            .collect();
        let out = Rel {
            stream,
            scope,
            time_columns: Vec::new(),
            proc_time_attrs: Vec::new(),
            primary_key: Vec::new(),
            upsert_keys: Some(keys),
            alias: rel.alias.clone(),
        };
        let exprs = select_exprs(select, &out, Some(&aggs))?;
        Ok((out, exprs))
    }

    fn window_aggregate(
        &self,
        rel: Rel,
        mut w: WindowAggregate,
        select: &Select,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        let (rel, keys, aggs) = grouping(rel, select, true)?;
        for (_, a) in &aggs {
            w = w.aggregate(a.clone());
        }
        let strategy = if let Some(s) = self.settings.get("weir.aggregation.salts") {
            let salts = s
                .parse()
                .map_err(|_| plan_err(format!("'weir.aggregation.salts' = '{s}': not a number")))?;
            let hot = self
                .settings
                .get("weir.aggregation.hot-key-share")
                .map(|v| v.parse::<f64>())
                .transpose()
                .map_err(|_| plan_err("'weir.aggregation.hot-key-share' is not a number"))?;
            AggStrategy::Salted {
                salts,
                hot_share: hot,
            }
        } else if self
            .settings
            .get("table.optimizer.agg-phase-strategy")
            .is_some_and(|v| v.eq_ignore_ascii_case("TWO_PHASE"))
        {
            AggStrategy::TwoPhase
        } else {
            AggStrategy::OnePhase
        };
        let out = rel.stream.key_by(&keys).window_aggregate_with(w, strategy);
        // window_start / window_end as TIMESTAMP, as Flink presents them.
        let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()));
        let schema = out.schema();
        let cols: Vec<(String, SqlScalar)> = schema
            .fields()
            .iter()
            .map(|f| {
                let n = f.name().clone();
                let e = if ["window_start", "window_end"].contains(&n.as_str()) {
                    SqlScalar::column(&n).cast(&ts)
                } else {
                    SqlScalar::column(&n)
                };
                (n, e)
            })
            .collect();
        let stream = out.apply("calc", Arc::new(Calc::project(cols)));
        let mut scope: Vec<ScopeEntry> = rel
            .scope
            .iter()
            .filter(|e| keys.contains(&e.column))
            .cloned()
            .collect();
        for n in ["window_start", "window_end", "window_time"] {
            scope.push(ScopeEntry {
                qualifier: None,
                name: n.into(),
                column: n.into(),
            });
        }
        let windowed = Rel {
            primary_key: Vec::new(),
            upsert_keys: None,
            proc_time_attrs: Vec::new(),
            stream,
            scope,
            time_columns: vec!["window_time".into()],
            alias: rel.alias.clone(),
        };
        let exprs = select_exprs(select, &windowed, Some(&aggs))?;
        Ok((windowed, exprs))
    }
}

/// Rows that update their key's result go only to an upsert sink whose PRIMARY KEY receives
/// exactly the group keys.
fn check_upsert_sink(
    sink: &TableDef,
    sink_cols: &[(String, DataType)],
    exprs: &[SqlScalar],
    keys: &[String],
) -> Result<()> {
    let fix = format!(
        "write it to an 'upsert-kafka' table whose PRIMARY KEY takes the group keys ({})",
        keys.join(", ")
    );
    if !is_upsert(sink) || sink.primary_key.is_empty() {
        return Err(plan_err(format!(
            "INSERT INTO `{}`: a GROUP BY without a window gives updates of each key's result, which an append-only table cannot hold; {fix}",
            sink.name
        )));
    }
    let mut fed: Vec<String> = Vec::new();
    for pk in &sink.primary_key {
        let pos = sink_cols
            .iter()
            .position(|(n, _)| n.eq_ignore_ascii_case(pk));
        match pos.and_then(|p| exprs[p].as_column()) {
            Some(c) if keys.contains(&c) => fed.push(c),
            _ => {
                return Err(plan_err(format!(
                "INSERT INTO `{}`: its PRIMARY KEY column `{pk}` must receive a group key; {fix}",
                sink.name
            )))
            }
        }
    }
    if keys.iter().any(|k| !fed.contains(k)) {
        return Err(plan_err(format!(
            "INSERT INTO `{}`: PRIMARY KEY ({}) does not take every group key; {fix}",
            sink.name,
            sink.primary_key.join(", ")
        )));
    }
    Ok(())
}

/// A grouped relation, its keys (stream columns) and its aggregates (by their SQL text).
type Grouping = (Rel, Vec<String>, Vec<(String, Aggregate)>);

/// The keys (stream columns) and aggregates of a grouped SELECT, and the relation to aggregate
/// (with aggregated expressions computed into columns). `windowed`: `window_start` and
/// `window_end` in GROUP BY name the window, not keys.
fn grouping(rel: Rel, select: &Select, windowed: bool) -> Result<Grouping> {
    let GroupByExpr::Expressions(group, _) = &select.group_by else {
        return Err(plan_err("GROUP BY ALL is not supported"));
    };
    if let Some(h) = &select.having {
        return Err(plan_err(format!(
            "HAVING {h} is not supported yet; filter the aggregated rows in an outer query or view"
        )));
    }
    let mut keys = Vec::new();
    for g in group {
        let name = ident_name(g)
            .ok_or_else(|| plan_err(format!("GROUP BY {g}: weir groups by columns")))?;
        if windowed
            && (name.eq_ignore_ascii_case("window_start")
                || name.eq_ignore_ascii_case("window_end"))
        {
            continue;
        }
        let column = match g {
            SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
                rel.resolve(Some(&p[0].value), &name)?
            }
            _ => rel.resolve(None, &name)?,
        };
        keys.push(column);
    }
    if keys.is_empty() {
        return Err(plan_err(
            "an aggregation needs at least one key column in GROUP BY (besides the window)",
        ));
    }
    // Aggregate calls of the select list become the operator's aggregates.
    let mut aggs: Vec<(String, Aggregate)> = Vec::new();
    let mut args: Vec<(String, SqlScalar)> = Vec::new();
    for item in &select.projection {
        let e = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => continue,
        };
        collect_aggregates(e, &rel, &mut aggs, &mut args)?;
    }
    // Aggregated expressions (`SUM(price * qty)`) become columns first.
    let mut rel = rel;
    if !args.is_empty() {
        let schema = rel.stream.schema();
        let mut cols: Vec<(String, SqlScalar)> = (schema.fields().iter())
            .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
            .collect();
        cols.extend(args);
        rel.stream = rel.stream.apply("calc", Arc::new(Calc::project(cols)));
    }
    Ok((rel, keys, aggs))
}

fn is_proctime(e: &SqlExpr) -> bool {
    matches!(e, SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case("PROCTIME"))
}

/// `name` as the table spells its column (names match case-insensitively).
pub(crate) fn table_column(t: &TableDef, name: &str) -> String {
    (t.columns.iter().map(col_name))
        .find(|c| c.eq_ignore_ascii_case(name))
        .unwrap_or(name)
        .to_string()
}

fn col_name(c: &ColumnDef) -> &str {
    match c {
        ColumnDef::Physical { name, .. } | ColumnDef::Computed { name, .. } => name,
    }
}

fn is_ident(e: &SqlExpr, name: &str) -> bool {
    matches!(e, SqlExpr::Identifier(i) if i.value.eq_ignore_ascii_case(name))
}

fn ident_name(e: &SqlExpr) -> Option<String> {
    match e {
        SqlExpr::Identifier(i) => Some(i.value.clone()),
        SqlExpr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()),
        _ => None,
    }
}

fn function_args(a: &FunctionArguments) -> Result<Vec<SqlExpr>> {
    match a {
        FunctionArguments::None => Ok(Vec::new()),
        FunctionArguments::List(l) => l
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e.clone()),
                FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => Ok(SqlExpr::Wildcard(
                    sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                )),
                other => Err(plan_err(format!("argument `{other}` is not supported"))),
            })
            .collect(),
        FunctionArguments::Subquery(_) => Err(plan_err("subquery arguments are not supported")),
    }
}

fn split_and<'a>(e: &'a SqlExpr, out: &mut Vec<&'a SqlExpr>) {
    match e {
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            split_and(left, out);
            split_and(right, out);
        }
        SqlExpr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}

/// Which side of a join a column reference belongs to, and its stream column there.
fn side_of(e: &SqlExpr, left: &Rel, right: &Rel) -> Option<(usize, String)> {
    let (q, n) = match e {
        SqlExpr::Identifier(i) => (None, i.value.clone()),
        SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
            (Some(p[0].value.clone()), p[1].value.clone())
        }
        _ => return None,
    };
    match (
        left.resolve(q.as_deref(), &n),
        right.resolve(q.as_deref(), &n),
    ) {
        (Ok(c), Err(_)) => Some((0, c)),
        (Err(_), Ok(c)) => Some((1, c)),
        _ => None,
    }
}

/// `side.time [+|- INTERVAL]` → (side, offset ms).
fn time_term(e: &SqlExpr, left: &Rel, right: &Rel) -> Option<(usize, i64)> {
    let attr = |x: &SqlExpr| {
        if left.is_time_attr(x) {
            Some(0)
        } else if right.is_time_attr(x) {
            Some(1)
        } else {
            None
        }
    };
    match e {
        SqlExpr::BinaryOp {
            left: a,
            op: BinaryOperator::Plus,
            right: b,
        } => Some((attr(a)?, interval_ms(b).ok()?)),
        SqlExpr::BinaryOp {
            left: a,
            op: BinaryOperator::Minus,
            right: b,
        } => Some((attr(a)?, -interval_ms(b).ok()?)),
        SqlExpr::Nested(x) => time_term(x, left, right),
        x => Some((attr(x)?, 0)),
    }
}

/// Time bounds of a join condition as `right.ts - left.ts ∈ [lower, upper]`, if the
/// conditions bound both ways.
fn time_bounds(conds: &[SqlExpr], left: &Rel, right: &Rel) -> Result<Option<(i64, i64)>> {
    let (mut lower, mut upper): (Option<i64>, Option<i64>) = (None, None);
    // Records `a_side.t + a_off  OP  b_side.t + b_off`.
    let mut add = |a: (usize, i64), op: &str, b: (usize, i64)| -> bool {
        if a.0 == b.0 {
            return false;
        }
        // Normalise to (right - left) compared with a constant.
        // a - b OP (b_off - a_off), with a = left or right.
        let c = b.1 - a.1;
        let (diff_is_right_minus_left, op) = if a.0 == 1 { (true, op) } else { (false, op) };
        // a.t - b.t OP c. If a is right: right - left OP c. Else: left - right OP c, i.e.
        // right - left (flipped OP) -c.
        let (op, c) = if diff_is_right_minus_left {
            (op, c)
        } else {
            (
                match op {
                    ">=" => "<=",
                    "<=" => ">=",
                    ">" => "<",
                    "<" => ">",
                    o => o,
                },
                -c,
            )
        };
        match op {
            ">=" => lower = Some(lower.map_or(c, |l| l.max(c))),
            ">" => lower = Some(lower.map_or(c + 1, |l| l.max(c + 1))),
            "<=" => upper = Some(upper.map_or(c, |u| u.min(c))),
            "<" => upper = Some(upper.map_or(c - 1, |u| u.min(c - 1))),
            _ => return false,
        }
        true
    };
    for c in conds {
        let ok = match c {
            SqlExpr::Between {
                expr,
                negated: false,
                low,
                high,
            } => match (
                time_term(expr, left, right),
                time_term(low, left, right),
                time_term(high, left, right),
            ) {
                (Some(x), Some(lo), Some(hi)) => add(x, ">=", lo) && add(x, "<=", hi),
                _ => false,
            },
            SqlExpr::BinaryOp {
                left: a,
                op,
                right: b,
            } => {
                let op = match op {
                    BinaryOperator::GtEq => ">=",
                    BinaryOperator::Gt => ">",
                    BinaryOperator::LtEq => "<=",
                    BinaryOperator::Lt => "<",
                    _ => "",
                };
                match (time_term(a, left, right), time_term(b, left, right)) {
                    (Some(x), Some(y)) if !op.is_empty() => add(x, op, y),
                    _ => false,
                }
            }
            _ => false,
        };
        if !ok {
            return Err(plan_err(format!(
                "join condition `{c}`: weir takes key equalities and bounds between the two sides' time attributes (e.g. a.rt BETWEEN b.rt AND b.rt + INTERVAL '10' SECOND)"
            )));
        }
    }
    Ok(match (lower, upper) {
        (Some(l), Some(u)) if l <= u => Some((l, u)),
        (Some(l), Some(u)) => {
            return Err(plan_err(format!(
                "the join's time bounds are empty: right - left in [{l}, {u}] ms"
            )))
        }
        _ => None,
    })
}

/// The expressions of a select list.
fn select_exprs(
    select: &Select,
    rel: &Rel,
    aggs: Option<&[(String, Aggregate)]>,
) -> Result<Vec<SqlScalar>> {
    let mut out = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                out.push(scalar_with_aggs(e, rel, aggs)?)
            }
            SelectItem::Wildcard(_) => {
                out.extend(rel.scope.iter().map(|e| SqlScalar::column(&e.column)));
            }
            other => return Err(plan_err(format!("select item `{other}` is not supported"))),
        }
    }
    Ok(out)
}

fn agg_fn(name: &str) -> Option<&'static str> {
    match name.to_uppercase().as_str() {
        "COUNT" => Some("count"),
        "SUM" => Some("sum"),
        "MIN" => Some("min"),
        "MAX" => Some("max"),
        "AVG" => Some("avg"),
        "APPROX_COUNT_DISTINCT" => Some("approx_count_distinct"),
        "MEDIAN" => Some("median"),
        _ => None,
    }
}

/// Adds the aggregate calls in `e` to `out`, keyed by their text. An argument that is an
/// expression rather than a column is added to `args` as a column to compute first.
fn collect_aggregates(
    e: &SqlExpr,
    rel: &Rel,
    out: &mut Vec<(String, Aggregate)>,
    args: &mut Vec<(String, SqlScalar)>,
) -> Result<()> {
    // Aggregate calls anywhere in the expression (inside CASE, IN, BETWEEN, ...).
    let mut calls = Vec::new();
    let _ = sqlparser::ast::visit_expressions(e, |x| {
        if let SqlExpr::Function(f) = x {
            if agg_fn(&f.name.to_string()).is_some() {
                calls.push(x.clone());
            }
        }
        ControlFlow::<()>::Continue(())
    });
    for call in &calls {
        add_aggregate(call, rel, out, args)?;
    }
    Ok(())
}

/// Adds aggregate call `e` to `out` (once per text).
fn add_aggregate(
    e: &SqlExpr,
    rel: &Rel,
    out: &mut Vec<(String, Aggregate)>,
    args: &mut Vec<(String, SqlScalar)>,
) -> Result<()> {
    match e {
        SqlExpr::Function(f) => {
            if let Some(kind) = agg_fn(&f.name.to_string()) {
                let key = e.to_string();
                let distinct = matches!(&f.args, FunctionArguments::List(l) if l.duplicate_treatment == Some(sqlparser::ast::DuplicateTreatment::Distinct));
                if distinct || f.filter.is_some() || f.over.is_some() {
                    return Err(plan_err(format!(
                        "`{key}`: DISTINCT, FILTER and OVER in aggregates are not supported; for distinct values use APPROX_COUNT_DISTINCT, for a condition SUM(CASE WHEN ... THEN 1 ELSE 0 END)"
                    )));
                }
                if out.iter().any(|(k, _)| *k == key) {
                    return Ok(());
                }
                let fargs = function_args(&f.args)?;
                let output = key.clone();
                let mut column = || -> Result<String> {
                    match fargs.first() {
                        Some(a) => match ident_name(a) {
                            Some(n) => rel.resolve(a_qualifier(a).as_deref(), &n),
                            None => {
                                let name = format!("__agg_arg_{}", args.len());
                                args.push((name.clone(), scalar(a, rel)?));
                                Ok(name)
                            }
                        },
                        None => Err(plan_err(format!("{key} needs an argument"))),
                    }
                };
                let agg = match kind {
                    "count" => match fargs.first() {
                        None | Some(SqlExpr::Wildcard(_)) => aggregates::count(&output),
                        Some(a) if a.to_string() == "1" => aggregates::count(&output),
                        Some(a) => {
                            return Err(plan_err(format!(
                                "COUNT({a}): weir counts rows with COUNT(*)"
                            )))
                        }
                    },
                    "sum" => aggregates::sum(&column()?, &output),
                    "min" => aggregates::min(&column()?, &output),
                    "max" => aggregates::max(&column()?, &output),
                    "avg" => aggregates::avg(&column()?, &output),
                    "approx_count_distinct" => {
                        aggregates::approx_count_distinct(&column()?, &output)
                    }
                    _ => aggregates::median(&column()?, &output),
                };
                out.push((key, agg));
                return Ok(());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The table alias of a qualified column reference.
fn a_qualifier(e: &SqlExpr) -> Option<String> {
    match e {
        SqlExpr::CompoundIdentifier(p) if p.len() == 2 => Some(p[0].value.clone()),
        _ => None,
    }
}

/// A SQL expression over `rel`, for DataFusion: every name resolved to the stream's column.
fn scalar(e: &SqlExpr, rel: &Rel) -> Result<SqlScalar> {
    scalar_with_aggs(e, rel, None)
}

/// [`scalar`], with aggregate calls (after a windowed GROUP BY) read from the aggregates'
/// output columns. The expression is planned here once, so that an unknown function or a
/// type error names the expression as the user wrote it.
fn scalar_with_aggs(
    e: &SqlExpr,
    rel: &Rel,
    aggs: Option<&[(String, Aggregate)]>,
) -> Result<SqlScalar> {
    struct Resolve<'a> {
        rel: &'a Rel,
        aggs: Option<&'a [(String, Aggregate)]>,
        error: Option<Error>,
        /// The functions being visited, innermost last: (name, whether weir has it).
        calls: Vec<(String, bool)>,
    }
    impl VisitorMut for Resolve<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
            if let SqlExpr::Function(_) = e {
                self.calls.pop();
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
            if let SqlExpr::Function(f) = e {
                let name = f.name.to_string();
                if agg_fn(&name).is_none() {
                    let known = crate::expr::is_scalar_function(&name);
                    self.calls.push((name, known));
                }
            }
            let column = match e {
                SqlExpr::Identifier(i) => self.rel.resolve(None, &i.value),
                SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
                    self.rel.resolve(Some(&p[0].value), &p[1].value)
                }
                SqlExpr::Function(f) if agg_fn(&f.name.to_string()).is_some() => {
                    let key = e.to_string();
                    match self.aggs.and_then(|a| a.iter().find(|(k, _)| *k == key)) {
                        Some((_, a)) => Ok(a.output.clone()),
                        None => Err(plan_err(format!(
                            "aggregate `{key}` outside a windowed GROUP BY"
                        ))),
                    }
                }
                _ => return ControlFlow::Continue(()),
            };
            match column {
                Ok(c) => {
                    *e = SqlExpr::Identifier(Ident::with_quote('`', c));
                    ControlFlow::Continue(())
                }
                Err(err) => {
                    // `TIMESTAMPADD(SECOND, ...)`: the function is what is missing, not a
                    // column named SECOND.
                    let unknown = self.calls.iter().find(|(_, known)| !known);
                    self.error = Some(match unknown {
                        Some((name, _)) => {
                            let hint = match name.to_uppercase().as_str() {
                                "TIMESTAMPADD" => "; add an interval instead: rt + INTERVAL '1' SECOND".to_string(),
                                "TIMESTAMPDIFF" => "; subtract instead: (UNIX_TIMESTAMP(..) - UNIX_TIMESTAMP(..)), or date_part on an interval".to_string(),
                                _ => did_you_mean(
                                    &name.to_lowercase(),
                                    crate::expr::scalar_function_names().iter().map(String::as_str),
                                ),
                            };
                            plan_err(format!(
                                "unknown function `{name}`{hint}; weir has DataFusion's functions, Flink's TO_TIMESTAMP_LTZ, DATE_FORMAT, UNIX_TIMESTAMP and IF, and the aggregates COUNT, SUM, MIN, MAX, AVG, APPROX_COUNT_DISTINCT, MEDIAN"
                            ))
                        }
                        None => err,
                    });
                    ControlFlow::Break(())
                }
            }
        }
    }
    let mut resolved = e.clone();
    let mut v = Resolve {
        rel,
        aggs,
        error: None,
        calls: Vec::new(),
    };
    let _ = resolved.visit(&mut v);
    if let Some(err) = v.error {
        return Err(err);
    }
    let s = SqlScalar::new(resolved.to_string());
    s.try_plan(&rel.stream.schema())
        .map_err(|m| plan_err(format!("`{e}`: {m}")))?;
    Ok(s)
}
