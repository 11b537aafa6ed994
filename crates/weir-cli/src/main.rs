//! `weir`: run, inspect and benchmark stream jobs.

#![warn(clippy::unwrap_used)]
mod bench;
mod control;
mod cutover;
mod demo;
mod gen;
mod group;
mod procstat;
mod status;
mod supervise;
mod top;
mod validate;
mod web;

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A stream processor for event-time joins that stay correct and bounded"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a job to the end of its input: SQL in the Flink dialect (`.sql`) or a job graph
    /// (JSON, as written by `weir demo --write-job`).
    Run(RunArgs),
    /// Run a SQL job again over history as a separate job: its own name, checkpoints, Kafka
    /// consumer groups and state; every output redirected (`--suffix`, `--sink-map`); every
    /// input from one event-time point (`--from`), aligned, until `--until` (or on, as the
    /// next live job); the sinks rate limited (`--rate`). Takes every option of `weir run`.
    Backfill {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        backfill: BackfillArgs,
    },
    /// Compare a backfill's output with the live one: row counts, rows on one side only
    /// (by key or as multisets), sums of numeric columns, the first differences side by side.
    /// Tables of PostgreSQL or SQLite, or files (CSV, JSON lines, Parquet, folders of part
    /// files), in bounded memory. Exit 0 when equal (within tolerances), 1 when not, 2 on
    /// errors.
    Validate(validate::ValidateArgs),
    /// Switch readers from the live job's table to a backfill's: re-point the view they read,
    /// in one transaction recorded in `weir_cutovers`, once the backfill has caught up (its
    /// watermark at or past the live job's) and its output validates; `--rollback` points the
    /// view back.
    Cutover(cutover::CutoverArgs),
    /// Where running jobs are in event time: each one's watermark, time lag and whether it has
    /// caught up, and how far each is behind the first (from their HTTP APIs or checkpoints).
    Status(status::StatusArgs),
    /// Print the physical plan: nodes, the state bound of every stateful operator, the
    /// partitioning of every edge, schemas.
    Explain {
        job: PathBuf,
        /// `name=value` for `${name}` in a SQL job (repeatable).
        #[arg(long = "var", value_parser = parse_var)]
        vars: Vec<(String, String)>,
    },
    /// Write generator data to files.
    Gen(gen::GenArgs),
    /// Run the ad-attribution scenario on generated data and print a summary.
    Demo(demo::DemoArgs),
    /// Measure throughput, CPU time and peak memory of a keyed count.
    Bench(bench::BenchArgs),
    /// Watch a job running on this machine in the terminal: operators (busy, backpressured,
    /// idle, the bottleneck), source splits and alerts, from its HTTP API.
    Top(top::TopArgs),
}

/// What `weir run` takes (and `weir backfill`).
#[derive(clap::Args)]
struct RunArgs {
    /// The job file.
    job: PathBuf,
    /// `name=value` for `${name}` in a SQL job (repeatable).
    #[arg(long = "var", value_parser = parse_var)]
    vars: Vec<(String, String)>,
    /// Override the parallelism of every node.
    #[arg(long)]
    parallelism: Option<usize>,
    /// Write metrics as JSON to this file every second and at the end.
    #[arg(long)]
    metrics_out: Option<PathBuf>,
    /// Where malformed records go (JSON lines).
    #[arg(long)]
    dead_letters: Option<PathBuf>,
    /// Start even when the inputs of a time-bounded join begin far apart in event time.
    #[arg(long)]
    allow_misaligned_start: bool,
    /// Fail when dead letters are more than this share of the records read (0 to 1;
    /// default 0.1, or the job's SET 'weir.max-dead-letter-share').
    #[arg(long)]
    max_dead_letter_share: Option<f64>,
    /// Take a checkpoint this often (`10s`, `500ms`; SQL: SET
    /// 'execution.checkpointing.interval'). Checkpoints record where every source split
    /// stands and every operator's state.
    #[arg(long, value_parser = parse_duration_ms)]
    checkpoint_interval: Option<i64>,
    /// Where checkpoints go (default `weir-checkpoints`, or SET
    /// 'execution.checkpointing.dir').
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Start from a checkpoint: `latest` (the newest in the checkpoint directory, or from
    /// the beginning when there is none, so one command line serves the first start and
    /// every restart) or a checkpoint folder.
    #[arg(long)]
    restore: Option<String>,
    /// Start from a savepoint (a folder SIGTERM or SIGUSR1 wrote; the same as --restore
    /// with that folder).
    #[arg(long, conflicts_with = "restore")]
    from_savepoint: Option<PathBuf>,
    /// On a restore, drop the state of operators the job no longer has or whose settings
    /// changed, instead of refusing to start.
    #[arg(long)]
    allow_non_restored_state: bool,
    /// Run as one member of group NAME, processes that share the job over Kafka: the job cut
    /// into tasks, one per partition of its input topics, shared evenly by the members alive,
    /// each task checkpointing into its own folder under the checkpoint folder (which every
    /// member must reach, and where the members find each other) and moving with it when a
    /// member leaves or dies. The job is cut at every re-keying (a join's, an aggregation's
    /// key) into stages joined by repartition topics, which the members make.
    #[arg(long, value_name = "NAME")]
    group: Option<String>,
    /// How long a group's repartition topics keep their records when they are made (`168h`,
    /// a week, or `12h`): a task that falls further behind finds records it has not read gone, and fails
    /// saying so.
    #[arg(long, value_parser = parse_duration_ms, default_value = "168h", requires = "group")]
    repartition_retention: i64,
    #[command(flatten)]
    http: web::HttpArgs,
}

/// What makes `weir backfill` a backfill.
#[derive(clap::Args)]
struct BackfillArgs {
    /// The event time every input starts at: epoch milliseconds or ISO-8601 in UTC
    /// (`2024-01-01`, `2024-01-01T10:00:00Z`, `2024-01-01 10:00:00.250`, or with an offset).
    #[arg(long, value_parser = parse_event_time)]
    from: i64,
    /// The event time the backfill ends at (exclusive); without it, it runs on past the
    /// present and becomes the next live job.
    #[arg(long, value_parser = parse_event_time)]
    until: Option<i64>,
    /// Added to the job's name, its checkpoint folder, its Kafka consumer groups, its
    /// dead-letter file and every output (before a file's extension: out/a.csv → out/a_v2.csv;
    /// after a table's or topic's name).
    #[arg(long)]
    suffix: String,
    /// `old=new`: write this output (a sink table's name, or its path, table or topic) to
    /// `new` instead of its name with the suffix (repeatable).
    #[arg(long = "sink-map", value_parser = parse_var)]
    sink_map: Vec<(String, String)>,
    /// Rows per second each sink writes at most (SQL: SET 'weir.sink.rate-limit').
    #[arg(long)]
    rate: Option<u64>,
    /// How far one input may run ahead of the slowest in event time (watermark alignment of
    /// every source without an alignment group of its own).
    #[arg(long, value_parser = parse_duration_ms, default_value = "1min")]
    align_drift: i64,
    /// Run lookup joins, whose answers depend on when they run, rather than refuse them.
    #[arg(long)]
    allow_lookup: bool,
}

/// An event time on the command line (see [`weir_core::time::parse_event_time`]).
pub(crate) fn parse_event_time(s: &str) -> Result<i64, String> {
    weir_core::time::parse_event_time(s)
}

/// `weir run` fails when more than this share of the records read are dead letters, unless
/// the job or the command line says otherwise.
const DEFAULT_MAX_DEAD_LETTER_SHARE: f64 = 0.1;

fn registry() -> weir_runtime::Registry {
    let mut r = weir_runtime::Registry::with_builtins();
    weir_operators::register(&mut r);
    weir_connectors::register(&mut r);
    weir_sql::register(&mut r);
    weir_jdbc::register(&mut r);
    // A sink of any kind held to a rate: `{"rows_per_sec": N, "per_sink": b, "inner": {"kind",
    // "spec"}}`, as `RateLimitedSink` writes itself into a job graph.
    r.add_sink("rate_limited", |spec| {
        #[derive(serde::Deserialize)]
        struct Inner {
            kind: String,
            #[serde(default)]
            spec: serde_json::Value,
        }
        #[derive(serde::Deserialize)]
        struct RateLimited {
            rows_per_sec: u64,
            #[serde(default)]
            per_sink: bool,
            inner: Inner,
        }
        let s: RateLimited = weir_runtime::graph::spec_from_json("rate_limited", spec)?;
        let inner = registry().sink(&s.inner.kind, &s.inner.spec)?;
        let rate = weir_runtime::RateLimitHandle::new(s.rows_per_sec);
        Ok(std::sync::Arc::new(if s.per_sink {
            weir_runtime::RateLimitedSink::per_sink(inner, rate)
        } else {
            weir_runtime::RateLimitedSink::new(inner, rate)
        }))
    });
    r
}

/// `10s`, `500ms`, `2min`, `1h` (a bare number is milliseconds).
fn parse_duration_ms(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: i64 = n
        .parse()
        .map_err(|_| format!("`{s}`: expected a duration such as 10s or 500ms"))?;
    let f = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "min" | "m" => 60_000,
        "h" => 3_600_000,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}`; use ms, s, min or h"
            ))
        }
    };
    n.checked_mul(f)
        .ok_or_else(|| format!("`{s}`: longer than weir can count in milliseconds"))
}

fn parse_var(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("`{s}`: expected name=value"))
}

/// The job in the file at `path`, planned as a backfill of itself when `backfill` says so
/// (then with what the backfill does differently).
fn read_job(
    path: &PathBuf,
    vars: &[(String, String)],
    parallelism: Option<usize>,
    checkpoint_interval_ms: Option<i64>,
    backfill: Option<&weir_sql::BackfillOptions>,
) -> Result<(weir_runtime::JobGraph, Option<weir_sql::BackfillPlan>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading job file {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "sql") {
        let opts = weir_sql::PlanOptions {
            vars: vars.iter().cloned().collect(),
            parallelism,
            name: path.file_stem().map(|s| s.to_string_lossy().into_owned()),
            checkpoint_interval_ms,
            backfill: backfill.cloned(),
        };
        let in_file = || format!("in {}", path.display());
        if backfill.is_some() {
            let (graph, plan) = weir_sql::plan_backfill(&text, &opts).with_context(in_file)?;
            return Ok((graph, Some(plan)));
        }
        return Ok((
            weir_sql::plan_job(&text, &opts).with_context(in_file)?,
            None,
        ));
    }
    if backfill.is_some() {
        anyhow::bail!(
            "weir backfill takes a SQL job (.sql): it redirects the outputs its CREATE TABLE \
             statements name; {} is a job graph",
            path.display()
        );
    }
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let mut graph = weir_runtime::JobGraph::from_json(&value, &registry())?;
    if let Some(p) = parallelism {
        // Every node but the sinks, which keep their own (one file per sink).
        graph.config.parallelism = p;
        for n in &mut graph.nodes {
            if !matches!(n.kind, weir_runtime::graph::NodeKind::Sink { .. }) {
                n.parallelism = p;
            }
        }
        for e in &mut graph.edges {
            if e.partitioning == weir_runtime::Partitioning::Forward
                && graph.nodes[e.from].parallelism != graph.nodes[e.to].parallelism
            {
                e.partitioning = weir_runtime::Partitioning::Rebalance;
            }
        }
    }
    Ok((graph, None))
}

/// Runs the command; an error is printed as its message and causes, with a backtrace (when
/// RUST_BACKTRACE asks for one) only for an internal error, a bug in weir: a user's mistake is
/// not a crash.
fn main() {
    if let Err(e) = run() {
        eprintln!("Error: {e:#}");
        let internal = e.chain().any(|c| {
            matches!(
                c.downcast_ref::<weir_runtime::Error>(),
                Some(weir_runtime::Error::Internal(_))
            )
        });
        if internal && e.backtrace().status() == std::backtrace::BacktraceStatus::Captured {
            eprintln!("\nStack backtrace:\n{}", e.backtrace());
        }
        std::process::exit(1);
    }
}

/// Refuses an output of the run (the dead-letter file, the metrics file, the checkpoint
/// folder) that is a file one of the job's sources reads: writing it would destroy the input
/// the job is reading (a truncated input read to its new end, exit 0).
fn check_outputs_are_not_inputs(
    graph: &weir_runtime::JobGraph,
    outputs: &[(&str, Option<&std::path::Path>)],
) -> Result<()> {
    for (what, path) in outputs {
        let Some(path) = path else { continue };
        let place = weir_runtime::Location::File(weir_runtime::location::normalise_path(path));
        for n in &graph.nodes {
            if let weir_runtime::graph::NodeKind::Source { factory, .. } = &n.kind {
                if factory.reads(&place) {
                    anyhow::bail!(
                        "{what} {} is what source `{}` reads: writing it would destroy the job's \
                         input; give another path",
                        path.display(),
                        n.name
                    );
                }
            }
        }
    }
    Ok(())
}

fn run() -> Result<()> {
    tracing_subscriber::fmt()
        // Colour only for a terminal: piped and CI logs get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // Every command runs on the jobs' runtime (see `exec::runtime`: no LIFO slot).
    let rt = weir_runtime::exec::runtime()?;
    match cli.command {
        Command::Run(args) => run_job(&rt, args, None)?,
        Command::Backfill { run, backfill } => run_job(&rt, run, Some(backfill))?,
        Command::Explain { job, vars } => print!("{}", read_job(&job, &vars, None, None, None)?.0),
        Command::Gen(args) => rt.block_on(gen::run(args))?,
        Command::Demo(args) => rt.block_on(demo::run(args))?,
        Command::Bench(args) => rt.block_on(bench::run(args))?,
        Command::Top(args) => top::run(args)?,
        Command::Cutover(args) => print!("{}", cutover::run(&rt, &args)?),
        Command::Status(args) => print!("{}", status::run(&args)?),
        Command::Validate(args) => match validate::run(&rt, &args) {
            Ok(outcome) => {
                print!("{}", outcome.report);
                std::process::exit(if outcome.equal { 0 } else { 1 });
            }
            Err(e) => {
                eprintln!("Error: {e:#}");
                std::process::exit(2);
            }
        },
    }
    Ok(())
}

/// `weir run` and `weir backfill`.
fn run_job(
    rt: &tokio::runtime::Runtime,
    args: RunArgs,
    backfill: Option<BackfillArgs>,
) -> Result<()> {
    let RunArgs {
        job,
        vars,
        parallelism,
        metrics_out,
        dead_letters,
        allow_misaligned_start,
        max_dead_letter_share,
        checkpoint_interval,
        checkpoint_dir,
        restore,
        from_savepoint,
        allow_non_restored_state,
        group,
        repartition_retention,
        http,
    } = args;
    if let Some(b) = &backfill {
        if b.suffix.trim().is_empty() {
            anyhow::bail!(
                "--suffix '': a backfill is a separate job, and the suffix is what keeps its \
                 name, checkpoints, consumer groups and outputs apart from the live job's; give \
                 one, such as _v2"
            );
        }
        for (given, what) in [
            (checkpoint_dir.is_some(), "--checkpoint-dir"),
            (dead_letters.is_some(), "--dead-letters"),
        ] {
            if given {
                anyhow::bail!(
                    "{what}: a backfill names its own (the live job's with --suffix), so that it \
                     never restores or overwrites the live job's; leave {what} out"
                );
            }
        }
    }
    let backfill = backfill.map(|b| weir_sql::BackfillOptions {
        range: weir_runtime::backfill::BackfillRange {
            from_ms: b.from,
            until_ms: b.until,
            now_ms: weir_core::time::Clock::now(&weir_core::SystemClock).0,
        },
        suffix: b.suffix,
        sink_map: b.sink_map.into_iter().collect(),
        rate: b.rate,
        align_drift_ms: b.align_drift,
        allow_lookup: b.allow_lookup,
    });
    let restore = restore.or(from_savepoint.map(|p| p.display().to_string()));
    // The interval is planned into the job, so its other checkpoint and restart SETs
    // apply; for a JSON job it is set below.
    let (mut graph, backfill_plan) = read_job(
        &job,
        &vars,
        parallelism,
        checkpoint_interval,
        backfill.as_ref(),
    )?;
    graph.config.allow_misaligned_start |= allow_misaligned_start;
    graph.config.max_dead_letter_share = max_dead_letter_share
        .or(graph.config.max_dead_letter_share)
        .or(Some(DEFAULT_MAX_DEAD_LETTER_SHARE));
    if checkpoint_interval.is_some() || checkpoint_dir.is_some() {
        let c = graph.config.checkpointing.get_or_insert_with(|| {
            weir_runtime::checkpoint::CheckpointConfig::new(10_000, "weir-checkpoints")
        });
        if let Some(ms) = checkpoint_interval {
            c.interval_ms = ms;
        }
        if let Some(dir) = checkpoint_dir {
            c.dir = dir;
        }
    }
    let restore_asked = restore.clone();
    if let Some(r) = restore {
        let Some(c) = graph.config.checkpointing.as_mut() else {
            anyhow::bail!(
                "--restore {r}: the job takes no checkpoints; give --checkpoint-interval \
                 (or SET 'execution.checkpointing.interval' in the job)"
            );
        };
        c.restore = Some(r);
        c.allow_non_restored_state = allow_non_restored_state;
    }
    graph.validate()?;
    let dead_letters_given = dead_letters.is_some();
    if dead_letters.is_some() {
        graph.config.dead_letter_path = dead_letters;
    }
    if graph.config.dead_letter_path.is_none() {
        graph.config.dead_letter_path = Some(PathBuf::from("weir-dead-letters.jsonl"));
    }
    if let (Some(b), false) = (&backfill, dead_letters_given) {
        // Never the live job's dead letters.
        let live = graph.config.dead_letter_path.take().unwrap_or_default();
        graph.config.dead_letter_path = Some(PathBuf::from(weir_sql::with_suffix(
            "filesystem",
            &live.to_string_lossy(),
            &b.suffix,
        )));
    }
    let dead_letter_path = graph.config.dead_letter_path.clone();
    let checkpoint_dir = graph.config.checkpointing.as_ref().map(|c| c.dir.clone());
    check_outputs_are_not_inputs(
        &graph,
        &[
            ("--dead-letters", dead_letter_path.as_deref()),
            ("--metrics-out", metrics_out.as_deref()),
            ("the checkpoint folder", checkpoint_dir.as_deref()),
        ],
    )?;
    if let Some(name) = group {
        if backfill.is_some() {
            anyhow::bail!(
                "--group: a backfill runs as a single process (a group of backfills is not \
                 built yet)"
            );
        }
        if metrics_out.is_some() {
            anyhow::bail!(
                "--metrics-out: a member of a group writes no metrics file yet (each task is a \
                 job of its own); its HTTP API's /api/v1/group shows each task's progress"
            );
        }
        let mut plan = group::plan(graph, &name)?;
        plan.repartition_retention_ms = repartition_retention;
        let code = rt.block_on(async {
            let listeners = supervise::Listeners::install()?;
            let web = web::Web::start(&http, plan.graph(), None).await?;
            let http = web.as_ref().map(|w| (w.view().clone(), w.addr()));
            let code = group::run(plan, http, &listeners).await;
            if let Some(web) = web {
                web.finish(&listeners).await;
            }
            code
        })?;
        std::process::exit(code);
    }
    if let Some(dir) = &checkpoint_dir {
        group::refuse_group_folder(dir)?;
    }
    let progress = match &backfill {
        Some(b) => supervise::Progress::Range(b.range),
        None => supervise::Progress::Input,
    };
    if let (Some(b), Some(plan)) = (&backfill, &backfill_plan) {
        eprint!(
            "{}",
            describe_backfill(b, plan, dead_letter_path.as_deref())
        );
    }
    let exit_code = rt.block_on(async {
        let listeners = supervise::Listeners::install()?;
        let web = web::Web::start(&http, &graph, backfill.as_ref().map(|b| b.range)).await?;
        let result = supervise::run_restarting(
            graph,
            metrics_out.as_deref(),
            progress,
            web.as_ref().map(web::Web::view),
            &listeners,
        )
        .await
        .map(supervise::Supervised::ended);
        if let Ok((report, None)) = &result {
            eprint!("{}", supervise::summary(report));
            if let (Some(r), None) = (&restore_asked, &report.restored) {
                eprintln!("restored:       nothing (--restore {r}: no checkpoint yet), started from the beginning");
            }
        }
        if let Some(web) = web {
            web.finish(&listeners).await;
        }
        result.map(|(_, code)| code)
    })?;
    if let Some(code) = exit_code {
        std::process::exit(code);
    }
    Ok(())
}

/// What a backfill does differently from its job, printed before it starts.
fn describe_backfill(
    b: &weir_sql::BackfillOptions,
    plan: &weir_sql::BackfillPlan,
    dead_letters: Option<&std::path::Path>,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "backfill `{}`: event time from {} {}",
        plan.job,
        weir_core::time::format_utc(b.range.from_ms),
        b.range.until_ms.map_or(
            "on past the present (it becomes the next live job)".to_string(),
            |u| format!("until {}", weir_core::time::format_utc(u))
        )
    );
    for (table, old, new) in &plan.sinks {
        let _ = writeln!(out, "  output {table}: {new} (the live job writes {old})");
    }
    for s in &plan.sources {
        let _ = writeln!(out, "  input {}: {}", s.source, s.note);
    }
    if let Some(dir) = &plan.checkpoints {
        let _ = writeln!(out, "  checkpoints: {dir}");
    }
    if let Some(p) = dead_letters {
        let _ = writeln!(out, "  dead letters: {}", p.display());
    }
    for w in &plan.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
    match b.rate {
        Some(r) => {
            let _ = writeln!(out, "  rate: at most {r} rows/s into each sink");
        }
        None => {
            let _ = writeln!(out, "  rate: not limited (--rate)");
        }
    }
    out
}
