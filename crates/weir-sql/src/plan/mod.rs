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
//!   APPROX_COUNT_DISTINCT, MEDIAN;
//! - an OVER aggregation (`over.rs`): `agg(x) OVER (PARTITION BY k ORDER BY rt RANGE|ROWS
//!   BETWEEN ... PRECEDING AND CURRENT ROW)`.
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
    Select, SelectItem, SetExpr, SetOperator, Statement, TableFactor, TableObject, TableVersion,
    VisitMut, VisitorMut,
};
use weir_core::watermark::WatermarkStrategy;
use weir_operators::aggregates::{self, Aggregate};
use weir_operators::join::join_schema;
use weir_operators::{
    AggStrategy, AggregateExt, ChangelogNormalizeExt, GroupAggregate, GroupAggregateExt,
    IntervalJoin, IntervalJoinExt, JoinType, RegularJoin, RegularJoinExt, TemporalJoin,
    TemporalJoinExt, WindowAggregate,
};
use weir_runtime::graph::WatermarkAlignment;
use weir_runtime::{JobBuilder, JobConfig, JobGraph, SourceOptions, Stream};

use crate::calc::Calc;
use crate::connectors::{self, is_upsert, is_upsert_sink, primary_key_columns, OP_COLUMN};
use crate::dialect::TABLE_ARG;
use crate::expr::SqlScalar;
use crate::parse::{parse_job, substitute, ColumnDef, JobStatement, TableDef};
use crate::zone::{SessionZone, LOCAL_TIME_ZONE};
use crate::{Error, Result};

mod aggregate;
mod backfill;
mod hybrid;
mod joins;
mod over;
mod rank;
mod scope;
mod settings;
mod sources;
mod union;
mod unnest;
mod variance;
mod with;

use aggregate::*;
use scope::*;
use settings::*;

pub use backfill::{with_suffix, BackfillOptions, BackfillPlan};
pub(crate) use sources::physical_columns;
use sources::{files_read_in_step, group_files_in_step};

/// Settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// `${name}` substitutions.
    pub vars: BTreeMap<String, String>,
    /// Overrides `SET 'parallelism.default'`.
    pub parallelism: Option<usize>,
    /// The job's name when it does not `SET 'pipeline.name'` (the CLI gives the file's
    /// name); "sql job" when neither does. Sinks that remember what they committed per job
    /// (jdbc) go by it.
    pub name: Option<String>,
    /// Overrides `SET 'execution.checkpointing.interval'` (the command line's
    /// `--checkpoint-interval`): checkpoints on, with the job's other checkpoint and restart
    /// settings (`execution.checkpointing.dir`, `state.checkpoints.num-retained`,
    /// `restart-strategy.*`) as the job sets them.
    pub checkpoint_interval_ms: Option<i64>,
    /// Plan the job as a backfill of itself ([`plan_backfill`]).
    pub backfill: Option<BackfillOptions>,
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
    Ok(plan_job_on_its_thread(sql, opts)?.0)
}

/// Plans the job file `sql` as a backfill of itself (`opts.backfill`, see [`BackfillOptions`]):
/// the graph, and what the backfill does differently from the job, to tell the user.
///
/// # Errors
/// As [`plan_job`]; also a lookup join (unless allowed), a source without event time, a sink
/// without a new target.
pub fn plan_backfill(sql: &str, opts: &PlanOptions) -> Result<(JobGraph, BackfillPlan)> {
    if opts.backfill.is_none() {
        return Err(plan_err("plan_backfill needs PlanOptions::backfill"));
    }
    let (graph, plan) = plan_job_on_its_thread(sql, opts)?;
    Ok((graph, plan.unwrap_or_default()))
}

fn plan_job_on_its_thread(
    sql: &str,
    opts: &PlanOptions,
) -> Result<(JobGraph, Option<BackfillPlan>)> {
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

fn plan_job_here(sql: &str, opts: &PlanOptions) -> Result<(JobGraph, Option<BackfillPlan>)> {
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
    let mut backfill_plan = None;
    if let Some(b) = &opts.backfill {
        // Every table the job writes: INSERT targets and late-row tables.
        let mut written: Vec<String> = inserts
            .iter()
            .filter_map(|i| match &i.table {
                TableObject::TableName(n) => Some(unquote(&n.to_string()).to_lowercase()),
                _ => None,
            })
            .collect();
        written.extend(
            tables
                .values()
                .filter_map(|t| t.options.get(connectors::LATE_ROWS))
                .map(|n| n.to_lowercase()),
        );
        written.sort();
        written.dedup();
        let sinks = backfill::redirect(&mut tables, &written, &mut settings, b)?;
        backfill_plan = Some(BackfillPlan {
            sinks,
            ..Default::default()
        });
    }
    check_settings(&settings)?;
    let read_files_in_step = files_read_in_step(&settings)?;
    let batch = batch_options(&settings)?;
    refuse_calls(&inserts, &views, batch.is_some())?;
    let parallelism = match opts.parallelism {
        Some(p) => p,
        None => match settings.get("parallelism.default") {
            Some(v) => v.parse().map_err(|_| {
                plan_err(format!("SET 'parallelism.default' = '{v}': not a number"))
            })?,
            None => 1,
        },
    };
    let slo_time_lag_ms = match settings.get("weir.slo.time-lag") {
        Some(v) => Some(duration_ms("weir.slo.time-lag", v)?),
        None => None,
    };
    let max_dead_letter_share = match settings.get("weir.max-dead-letter-share") {
        Some(v) => Some(v.parse::<f64>().map_err(|_| {
            plan_err(format!(
                "SET 'weir.max-dead-letter-share' = '{v}': not a number (a share from 0 to 1)"
            ))
        })?),
        None => None,
    };
    let interval = match (
        opts.checkpoint_interval_ms,
        settings.get("execution.checkpointing.interval"),
    ) {
        (Some(ms), set) => {
            if let Some(v) = set {
                tracing::warn!(
                    "--checkpoint-interval {ms} ms overrides SET 'execution.checkpointing.interval' = '{v}'"
                );
            }
            Some(ms)
        }
        (None, Some(v)) => Some(duration_ms("execution.checkpointing.interval", v)?),
        (None, None) => None,
    };
    let checkpointing = match interval {
        Some(interval_ms) => {
            let mut c = weir_runtime::checkpoint::CheckpointConfig::new(
                interval_ms,
                settings
                    .get("execution.checkpointing.dir")
                    .or_else(|| settings.get("state.checkpoints.dir"))
                    .map_or("weir-checkpoints", String::as_str),
            );
            c.restart = restart_strategy(&settings)?;
            if let Some(b) = &opts.backfill {
                // Beside the live job's folder, never inside it (`ckpt/` is `ckpt_v2`).
                let live = c.dir.display().to_string();
                let live = live.trim_end_matches('/');
                if weir_state::checkpoint::names_a_whole_bucket(std::path::Path::new(live)) {
                    return Err(plan_err(format!(
                        "the backfill's checkpoints would go beside the live job's, {live}, \
                         which is a whole bucket: the suffix would name another bucket \
                         ({live}{}); give the live job a prefix in its bucket \
                         (SET 'execution.checkpointing.dir' = '{live}/<job>')",
                        b.suffix
                    )));
                }
                c.dir = format!("{live}{}", b.suffix).into();
            }
            if let Some(v) = settings.get("weir.checkpointing.lock-lease") {
                c.lock_lease_ms = duration_ms("weir.checkpointing.lock-lease", v)?.max(1);
            }
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
    let mut name = settings
        .get("pipeline.name")
        .cloned()
        .or_else(|| opts.name.clone())
        .unwrap_or_else(|| "sql job".into());
    if let Some(b) = &opts.backfill {
        name.push_str(&b.suffix);
    }
    let checkpoint_dir = checkpointing.as_ref().map(|c| c.dir.display().to_string());
    let job = JobBuilder::with_config(
        name,
        JobConfig {
            parallelism,
            max_dead_letter_share,
            slo_time_lag_ms,
            checkpointing,
            operator_chaining: operator_chaining(&settings)?,
            state_backend: state_backend(&settings)?,
            ..Default::default()
        },
    );
    let zone = match settings.get(LOCAL_TIME_ZONE) {
        Some(v) => SessionZone::parse(v).map_err(plan_err)?,
        None => SessionZone::utc(),
    };
    let planner = Planner {
        batch: batch.clone(),
        tables,
        views,
        settings,
        zone,
        job: job.clone(),
        late_rows: RefCell::default(),
        late_routed: RefCell::default(),
        ctes: RefCell::default(),
        subqueries: Default::default(),
        changelog_joins: Default::default(),
        read_files_in_step,
        in_step: RefCell::default(),
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
    group_files_in_step(&mut graph, &planner.in_step.borrow());
    // Nodes point at the statement that made them, not at the planner's source.
    for (range, made) in made_by {
        for id in range {
            graph.nodes[id].created_at = made.clone();
        }
    }
    if let (Some(b), Some(plan)) = (&opts.backfill, &mut backfill_plan) {
        plan.sources = weir_runtime::backfill::limit_to_range(&mut graph, b.range, b.allow_lookup)?;
        plan.warnings = weir_runtime::backfill::arrival_order_notes(&graph);
        plan.job = graph.name.clone();
        plan.checkpoints = checkpoint_dir;
    }
    if let Some(b) = &batch {
        weir_runtime::batch::run_as_batch(&mut graph, b)?;
    }
    Ok((graph, backfill_plan))
}

/// Whether the job's statements call function `name` (any case).
fn job_calls(inserts: &[Insert], views: &HashMap<String, (String, Query)>, name: &str) -> bool {
    fn calls<V: sqlparser::ast::Visit>(v: &V, name: &str) -> bool {
        sqlparser::ast::visit_expressions(v, |e| match e {
            SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case(name) => {
                std::ops::ControlFlow::Break(())
            }
            _ => std::ops::ControlFlow::Continue(()),
        })
        .is_break()
    }
    inserts.iter().any(|i| calls(i, name)) || views.values().any(|(_, q)| calls(q, name))
}

/// Refuses calls the job may not make: `CURRENT_WATERMARK` in a batch job, which has no
/// watermarks (Flink's batch execution refuses it too: its time attributes are plain
/// timestamps there), and the functions weir's own rewrites call (`WEIR_WELFORD_M2`, which
/// STDDEV and VAR expand to).
fn refuse_calls(
    inserts: &[Insert],
    views: &HashMap<String, (String, Query)>,
    batch: bool,
) -> Result<()> {
    if batch && job_calls(inserts, views, "CURRENT_WATERMARK") {
        return Err(plan_err(
            "CURRENT_WATERMARK: a batch job has no watermarks (as in Flink's batch execution, \
             which refuses it too); run the job in streaming mode, or leave it out",
        ));
    }
    if job_calls(inserts, views, variance::WELFORD_M2) {
        return Err(plan_err(format!(
            "{}: not a function of the job's to call (weir computes STDDEV and VAR with it); \
             use STDDEV_POP, STDDEV_SAMP, VAR_POP or VAR_SAMP",
            variance::WELFORD_M2
        )));
    }
    Ok(())
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

struct Planner {
    tables: HashMap<String, TableDef>,
    /// Views by lower-case name: (name, query). Each use plans the query again.
    views: HashMap<String, (String, Query)>,
    settings: BTreeMap<String, String>,
    /// `SET 'table.local-time-zone'` (UTC when not set).
    zone: SessionZone,
    job: JobBuilder,
    /// Late rows of sources with 'weir.late-rows', by the lower-case name of the table they go
    /// to: (its name, the rows of each source read, already in that table's columns).
    late_rows: RefCell<BTreeMap<String, (String, Vec<Stream>)>>,
    /// Source tables (lower case) whose late rows are routed already.
    late_routed: RefCell<std::collections::BTreeSet<String>>,
    /// The WITH queries in scope, outermost first (plan/with.rs).
    ctes: RefCell<Vec<with::Named>>,
    /// Subqueries in FROM without AS so far: each gets a name of its own.
    subqueries: std::cell::Cell<usize>,
    /// Regular joins of updates planned so far: each names its time column after its number,
    /// so a join of such a join's rows has a column of its own.
    changelog_joins: std::cell::Cell<usize>,
    /// `SET 'execution.runtime-mode' = 'batch'`: how the job runs as a batch job.
    batch: Option<weir_runtime::batch::BatchOptions>,
    /// `SET 'weir.files.read-in-step'` (true unless set to 'false').
    read_files_in_step: bool,
    /// The source nodes that may be read in step with others (`Planner::files_in_step`).
    in_step: RefCell<Vec<usize>>,
}

impl Planner {
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

    /// The sink writing table `t`, held to `SET 'weir.sink.rate-limit'` when the job sets one.
    fn sink_factory(
        &self,
        t: &TableDef,
        changes: bool,
    ) -> Result<(Arc<dyn weir_runtime::SinkFactory>, Option<usize>)> {
        let (factory, parallelism) = connectors::sink_factory(t, &self.job.name(), changes)?;
        let Some(v) = self.settings.get("weir.sink.rate-limit") else {
            return Ok((factory, parallelism));
        };
        let rate: u64 = v.trim().parse().ok().filter(|r| *r > 0).ok_or_else(|| {
            plan_err(format!(
                "SET 'weir.sink.rate-limit' = '{v}': rows per second each sink writes at most, \
                 a whole number above 0"
            ))
        })?;
        Ok((
            Arc::new(weir_runtime::RateLimitedSink::per_sink(
                factory,
                weir_runtime::RateLimitHandle::new(rate),
            )),
            parallelism,
        ))
    }

    fn setting(&self, key: &str, table: &TableDef) -> Option<String> {
        table
            .options
            .get(key)
            .or_else(|| self.settings.get(key))
            .cloned()
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
            let made_by = rel.changes.as_ref().map(|c| c.made_by.as_str());
            check_upsert_sink(sink, &sink_cols, &exprs, keys, made_by)?;
        } else if let Some(c) = &rel.changes {
            // Neither an append-only table (it would keep the taken-back rows) nor a table
            // keyed by columns that may repeat among the live rows (a delete would remove a
            // row another still holds) receives this exactly.
            return Err(plan_err(format!(
                "INSERT INTO `{}`: the query's rows are updates ({}) with no key that keeps them apart and in order (an append-only side's rows may repeat any key; an outer join's unmatched rows have NULLs for the other side's key; a join on other columns than either side's key sends a pair's changes through two subtasks), which no table receives exactly; aggregate them first (GROUP BY into a table keyed by the group), or inner join keyed changelogs (a GROUP BY, a keep-last deduplication) on a side's whole key into a table keyed by both sides' keys",
                sink.name, c.made_by
            )));
        }
        // Columns by position, cast to the sink's types (as Flink does).
        let schema = rel.stream.schema();
        let mut out = Vec::new();
        for ((name, t), e) in sink_cols.iter().zip(exprs) {
            let planned = e.plan(&schema)?;
            // Flink refuses an ARRAY into a column of another type; an explicit CAST to STRING
            // writes its text.
            if matches!(planned.data_type(), DataType::List(_)) && planned.data_type() != t {
                return Err(plan_err(format!(
                    "INSERT INTO `{}`, column `{name}`: `{e}` is an {}, and the column is {}; \
                     UNNEST it (CROSS JOIN UNNEST(...) AS u(x)), CAST it AS STRING for its \
                     text, or declare the column as that ARRAY in a JSON table",
                    sink.name,
                    crate::zone::sql_name(planned.data_type()),
                    crate::zone::sql_name(t)
                )));
            }
            let same = planned.data_type() == t;
            out.push((
                name.clone(),
                if same {
                    e
                } else {
                    crate::zone::cast_for_sink(e, planned.data_type(), t, &self.zone).map_err(
                        |m| plan_err(format!("INSERT INTO `{}`, column `{name}`: {m}", sink.name)),
                    )?
                },
            ));
        }
        // An upsert sink reads a changelog's change kinds (deletes, and -U rows to skip).
        let changes = rel.changes.is_some()
            && is_upsert_sink(sink)
            && rel.stream.schema().index_of(OP_COLUMN).is_ok();
        if changes {
            out.push((OP_COLUMN.into(), SqlScalar::column(OP_COLUMN)));
        }
        let (factory, parallelism) = self.sink_factory(sink, changes)?;
        let rows = rel.stream.apply("calc", Arc::new(Calc::project(out)));
        if is_upsert_sink(sink) {
            // A key's updates must reach the topic in order: one sink subtask per key.
            let pk = primary_key_columns(sink, "each record is keyed by it")?;
            rows.key_by(&pk)
                .sink_arc(sink.name.clone(), factory, parallelism);
        } else {
            rows.sink_arc(sink.name.clone(), factory, parallelism);
        }
        Ok(())
    }

    /// Plans a SELECT (or a UNION of SELECTs): the relation and the output expressions over it.
    fn query(&self, q: &Query) -> Result<(Rel, Vec<SqlScalar>)> {
        // WITH: its named queries in scope for the body (plan/with.rs).
        if let Some(w) = &q.with {
            return self.query_with(q, w);
        }
        if q.order_by.is_some() || q.limit_clause.is_some() || q.fetch.is_some() {
            return Err(plan_err(
                "ORDER BY, LIMIT and FETCH are not supported in a streaming query yet; use ROW_NUMBER() for the first rows per key or window",
            ));
        }
        let select = match q.body.as_ref() {
            SetExpr::Select(select) => select,
            // UNION ALL and UNION (plan/union.rs).
            SetExpr::SetOperation {
                op: SetOperator::Union,
                set_quantifier,
                left,
                right,
            } => return self.union(q, set_quantifier, left, right),
            SetExpr::SetOperation {
                op: op @ (SetOperator::Intersect | SetOperator::Except),
                set_quantifier,
                left,
                right,
            } => return self.set_operation(q, op, set_quantifier, left, right),
            SetExpr::Query(inner) => return self.query(inner),
            other => {
                return Err(plan_err(format!(
                    "weir plans a SELECT, or a UNION [ALL], INTERSECT or EXCEPT of SELECTs, not `{other}` (no VALUES yet)"
                )))
            }
        };
        let select: &Select = select;
        // SELECT DISTINCT: the rows without it, then each distinct row once (plan/rank.rs).
        if let Some(d) = &select.distinct {
            let mut plain = q.clone();
            if let SetExpr::Select(s) = plain.body.as_mut() {
                s.distinct = None;
            }
            let (rel, exprs) = self.query(&plain)?;
            let names = output_names(select, &rel)?;
            return self.distinct(d, names, rel, exprs);
        }
        // `FROM t, UNNEST(...) AS u(...)` is `t CROSS JOIN UNNEST(...)` (plan/unnest.rs).
        let unnest_after = match select.from.as_slice() {
            [_] => None,
            [_, u] if u.joins.is_empty() => unnest::as_unnest(&u.relation),
            _ => None,
        };
        if select.from.len() != 1 && unnest_after.is_none() {
            return Err(plan_err("weir plans a SELECT over one FROM item (a table, a join or a window table function), or a table and an UNNEST"));
        }
        // Window Top-N and deduplication: ROW_NUMBER() in a subquery of FROM (plan/rank.rs).
        if let Some(ranked) = self.rank_query(q, select)? {
            return Ok(ranked);
        }
        let from = &select.from[0];
        let (mut rel, window) = match &from.relation {
            TableFactor::TableFunction { expr, alias } => {
                if let Some(a) = alias {
                    return self.query(&with::unalias_window_tvf(q, a, &from.joins)?);
                }
                let (rel, w, partition) = self.window_tvf(expr)?;
                (rel, Some((w, partition)))
            }
            other => (self.table_factor(other)?.0, None),
        };
        for j in &from.joins {
            rel = match unnest::as_unnest(&j.relation) {
                Some(u) => self.unnest_join(rel, j, &u)?,
                None => self.join(rel, j)?,
            };
        }
        if let Some(u) = &unnest_after {
            rel = self.unnest(rel, u, false)?;
        }
        if (rel.updates() && window.is_some())
            || (rel.upsert_keys.is_some() && rel.changes.is_none() && select.selection.is_some())
        {
            return Err(plan_err(
                    "the rows of a GROUP BY without a window update their key's result: weir writes them to an upsert sink, filters, joins and aggregates them, but does not window them",
                ));
        }
        if let Some(w) = &select.selection {
            let pred = scalar(w, &rel)?;
            // Over a changelog the filter sees each replaced row taken back (`-U`), so that a
            // key whose new row fails the condition leaves an upsert sink.
            rel = self.retracting(rel)?;
            rel.stream = rel.stream.apply("calc", Arc::new(Calc::filter(pred)));
        }
        let grouped = match &select.group_by {
            GroupByExpr::Expressions(es, _) => !es.is_empty(),
            GroupByExpr::All(_) => true,
        };
        // GROUP BY over expressions: each computed into a column first.
        let rewritten = aggregate::group_expressions(&mut rel, select)?;
        let select = rewritten.as_ref().unwrap_or(select);
        match (window, grouped) {
            (Some((w, partition)), true) => self.window_aggregate(rel, w, &partition, select),
            (Some((w, partition)), false) => {
                let rel = self.window_rows(rel, w, &partition)?;
                let exprs = select_exprs(select, &rel, None)?;
                Ok((rel, exprs))
            }
            (None, true) => match self.group_window(&rel, select)? {
                Some((w, select)) => self.window_aggregate(rel, w, &[], &select),
                None => self.group_aggregate(rel, select),
            },
            (None, false) if over::has_over_aggregate(select) => self.over_aggregate(rel, select),
            (None, false) => {
                let exprs = select_exprs(select, &rel, None)?;
                Ok((rel, exprs))
            }
        }
    }

    /// `SET 'table.exec.state.ttl'`, if given. A batch job has none, as in Flink's batch
    /// execution: its state lives to the end of the input (see [`settings::batch_options`]).
    fn state_ttl_ms(&self) -> Result<Option<i64>> {
        if self.batch.is_some() {
            return Ok(Some(weir_core::time::TTL_END_OF_INPUT_MS));
        }
        (self.settings.get("table.exec.state.ttl"))
            .map(|v| duration_ms("table.exec.state.ttl", v))
            .transpose()
    }

    /// A view or table by name (`versioned`: read as a temporal join's versioned table).
    fn named(&self, name: &ObjectName, alias: Option<String>, versioned: bool) -> Result<Rel> {
        let key = unquote(&name.to_string()).to_lowercase();
        if name.0.len() == 1 {
            let written = unquote(&name.to_string());
            let alias = alias.clone().unwrap_or(written);
            if let Some(planned) = self.named_query(&key, &alias, versioned) {
                return planned;
            }
        }
        if let Some((view_name, q)) = self.views.get(&key) {
            // A view's names are the job's, whatever WITH queries are in scope where it is used.
            let hidden = std::mem::take(&mut *self.ctes.borrow_mut());
            let planned = self.view(q, &alias.unwrap_or_else(|| view_name.clone()));
            *self.ctes.borrow_mut() = hidden;
            return planned;
        }
        let t = self.table(name)?;
        let rel = self.source(t, &alias.unwrap_or_else(|| t.name.clone()))?;
        if is_upsert(t) && !versioned {
            return self.normalized(t, rel);
        }
        Ok(rel)
    }

    /// An `upsert-kafka` table read in FROM: its records made into a changelog that takes each
    /// key's replaced row back (`changelog_normalize`), which an upsert sink writes and a
    /// GROUP BY aggregates.
    fn normalized(&self, t: &TableDef, rel: Rel) -> Result<Rel> {
        let Some(event_time) = rel.stream.event_time() else {
            return Err(plan_err(format!(
                "table `{}` ('upsert-kafka') is a changelog: weir reads it in FROM with a WATERMARK on a column its records' time fills (a key's state TTL runs in it), or as the versioned table of a temporal join (JOIN {} FOR SYSTEM_TIME AS OF x.rt AS ...)",
                t.name, t.name
            )));
        };
        let ttl = (self.state_ttl_ms()?).unwrap_or(weir_core::time::TTL_END_OF_INPUT_MS);
        let spec = weir_operators::ChangelogNormalize::with_ttl(ttl, OP_COLUMN, &event_time);
        let stream = rel
            .stream
            .key_by(&rel.primary_key)
            .changelog_normalize(spec);
        Ok(Rel {
            stream,
            time_columns: Vec::new(),
            upsert_keys: Some(rel.primary_key.clone()),
            changes: Some(Changes {
                retracts: true,
                time_column: event_time,
                made_by: format!("the 'upsert-kafka' table `{}` read in FROM", t.name),
            }),
            ..rel
        })
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
            // A subquery in FROM is an unnamed view. Without AS (as Flink allows) its columns
            // are named without a qualifier, which no query can write.
            TableFactor::Derived {
                subquery, alias, ..
            } => {
                let alias = (alias.as_ref()).map_or_else(
                    || {
                        let n = self.subqueries.get() + 1;
                        self.subqueries.set(n);
                        format!("(subquery {n})")
                    },
                    |a| a.name.value.clone(),
                );
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
        let mut cols: Vec<(String, SqlScalar)> = Vec::new();
        let mut time_columns = Vec::new();
        // The output names, in the order of `exprs`: a union's are in its scope already.
        let names = match q.body.as_ref() {
            SetExpr::Select(select) => output_names(select, &rel)?,
            _ => rel.scope.iter().map(|e| e.name.clone()).collect(),
        };
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
        // A changelog keeps its change column, and the column its TTL runs in.
        let changes = match &rel.changes {
            Some(c) => {
                if rel.stream.schema().index_of(OP_COLUMN).is_ok() {
                    cols.push((OP_COLUMN.into(), SqlScalar::column(OP_COLUMN)));
                }
                let t = &c.time_column;
                let time_column = match cols.iter().find(|(_, e)| e.as_column().as_ref() == Some(t))
                {
                    Some((n, _)) => n.clone(),
                    None => {
                        cols.push((CHANGE_TIME.into(), SqlScalar::column(t)));
                        CHANGE_TIME.into()
                    }
                };
                Some(Changes {
                    retracts: c.retracts,
                    time_column,
                    made_by: c.made_by.clone(),
                })
            }
            None => None,
        };
        let upsert_keys = match &rel.upsert_keys {
            Some(keys) => {
                let mut named = Vec::new();
                for k in keys {
                    let out = cols.iter().find(|(_, e)| e.as_column().as_ref() == Some(k));
                    match out {
                        Some((n, _)) => named.push(n.clone()),
                        None => {
                            return Err(plan_err(format!(
                                "view `{alias}` over rows that update their key's result ({}) must select its keys as they are (missing `{k}`)",
                                rel.changes.as_ref().map_or("a keep-last deduplication without a window", |c| c.made_by.as_str())
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
            .filter(|(n, _)| !matches!(n.as_str(), "__event_time" | CHANGE_TIME | OP_COLUMN))
            .map(|(n, _)| ScopeEntry {
                qualifier: Some(alias.to_string()),
                name: n.clone(),
                column: n.clone(),
            })
            .collect();
        Ok(Rel {
            primary_key: Vec::new(),
            upsert_keys,
            changes,
            proc_time_attrs: Vec::new(),
            stream: rel.stream.apply("calc", Arc::new(Calc::project(cols))),
            scope,
            time_columns,
            alias: alias.to_string(),
            zone: rel.zone.clone(),
        })
    }
}

/// Rows that update their key's result go only to an upsert sink whose PRIMARY KEY receives
/// exactly the group keys.
fn check_upsert_sink(
    sink: &TableDef,
    sink_cols: &[(String, DataType)],
    exprs: &[SqlScalar],
    keys: &[String],
    made_by: Option<&str>,
) -> Result<()> {
    let fix = format!(
        "write it to an 'upsert-kafka' or 'jdbc' table whose PRIMARY KEY takes the keys ({})",
        keys.join(", ")
    );
    if !is_upsert_sink(sink) {
        return Err(plan_err(format!(
            "INSERT INTO `{}`: the query's rows update each key's result ({}), which an append-only table cannot hold; {fix}",
            sink.name,
            made_by.unwrap_or("the latest row per key without a window")
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
