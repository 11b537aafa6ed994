//! `weir bench`: throughput, CPU time, peak memory and peak state of weir's jobs, from the
//! generator and from CSV files. Each measurement runs in a fresh process so that its peak RSS
//! is its own. Numbers vary with the machine and its load: compare runs made together.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use arrow_schema::DataType;
use serde::{Deserialize, Serialize};
use weir_connectors::file::{FileFormat, FileSink, FileSource, FileSourceSpec};
use weir_connectors::generator::{schema_for, GeneratorSource, GeneratorSpec};
use weir_operators::aggregates::count;
use weir_operators::{
    AggStrategy, AggregateExt, IntervalJoin, IntervalJoinExt, KeyedStreamExt, TemporalJoin,
    TemporalJoinExt, WindowAggregate,
};
use weir_runtime::graph::WatermarkAlignment;
use weir_runtime::{
    BlackholeSink, JobBuilder, JobConfig, JobGraph, SourceFactory, SourceOptions, Stream,
};

use crate::procstat;

mod latency;

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum, Serialize, Deserialize)]
pub enum BenchJob {
    /// Events (80 % one hot key) counted per key.
    Count,
    /// Clicks joined to impressions of the same ad and user up to 10 s earlier.
    IntervalJoin,
    /// Orders priced with the FX rate valid at their event time.
    TemporalJoin,
    /// Events counted per key in 1-minute tumbling windows, one phase.
    WindowCount,
    /// The same with local pre-aggregation (two phases).
    WindowCountTwoPhase,
    /// The same salted over the subtasks.
    WindowCountSalted,
    /// The 1-minute window count written in SQL as the fixture query is (TO_TIMESTAMP_LTZ on
    /// every row, DATE_FORMAT / UNIX_TIMESTAMP on every result), planned by weir-sql with
    /// DataFusion expressions: what the SQL front end costs over `window-count`.
    SqlWindowCount,
    /// End-to-end latency of the interval join at a fixed rate (`--rate`, default 10 k and
    /// 100 k impressions/s), without and with checkpoints: p50 / p99 / max from a row's read
    /// to the sink, the watermark's delay apart. Not part of `all`.
    Latency,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum, Serialize, Deserialize)]
pub enum BenchInput {
    Generator,
    Csv,
    Both,
    /// `--job latency` only: the generator writes topics on the broker at `--bootstrap`
    /// while the job reads them.
    Kafka,
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value = "all")]
    pub job: BenchJob,
    #[arg(long, value_enum, default_value = "both")]
    pub input: BenchInput,
    /// Rows of the main input: events (default 10 M), impressions (1 M; clicks follow, about
    /// 0.32 per impression) or orders (1 M, with 20 k rate versions).
    #[arg(long)]
    pub rows: Option<u64>,
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Rows per batch.
    #[arg(long, default_value_t = 8192)]
    pub batch_rows: usize,
    /// Folder for CSV input (default: a temporary folder, removed afterwards).
    #[arg(long)]
    pub csv_dir: Option<PathBuf>,
    /// Align the sources' watermarks: at most this many ms of event time apart.
    #[arg(long)]
    pub align_drift_ms: Option<i64>,
    /// How often aligned sources report their watermarks.
    #[arg(long, default_value_t = 50)]
    pub align_interval_ms: i64,
    /// Watermark samples a pause decision looks back over (0: the latest only).
    #[arg(long, default_value_t = 3)]
    pub align_buffer: usize,
    /// Take a checkpoint this often (into a temporary folder, or under `--checkpoint-dir`), to
    /// measure what checkpoints cost.
    #[arg(long)]
    pub checkpoint_interval_ms: Option<i64>,
    /// With checkpoints: where they go, a folder or an object storage URL (`s3://bucket/prefix`,
    /// configured from the environment as `weir run` is); each run writes under a name of its
    /// own there.
    #[arg(long)]
    pub checkpoint_dir: Option<String>,
    /// Where operator state lives: `hashmap` (memory) or `rocksdb` (local disk, in a weir
    /// built with the `rocksdb` feature), as `SET 'state.backend.type'`.
    #[arg(long, default_value = "hashmap")]
    pub state_backend: String,
    /// With `--state-backend rocksdb`: memory for its caches and write buffers
    /// (`weir.state.memory-budget`, e.g. `64 mb`; default 256 mb).
    #[arg(long)]
    pub memory_budget: Option<String>,
    /// With `--state-backend rocksdb`: state a subtask holds in memory before it moves to disk
    /// (`weir.state.memory-first`: `true`, its share of the budget, the default; `false`, on
    /// disk from the start; or a size).
    #[arg(long)]
    pub memory_first: Option<String>,
    /// With `--state-backend rocksdb` and checkpoints: checkpoints write the stores' files, a
    /// table file once (`execution.checkpointing.incremental`).
    #[arg(long)]
    pub incremental: bool,
    /// `--job latency`: impressions a second (clicks follow at about 0.32 of it); default
    /// 10,000 and 100,000, one run each.
    #[arg(long)]
    pub rate: Option<u64>,
    /// `--job latency`: how long each run reads, in seconds (the first is left out).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// `--input kafka`: the broker, which must allow creating topics (default
    /// `WEIR_KAFKA_BOOTSTRAP`, else 127.0.0.1:9092).
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// Print one measurement as JSON (used for the child processes).
    #[arg(long, hide = true)]
    pub json: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Measured {
    job: BenchJob,
    input: BenchInput,
    rows_in: u64,
    rows_out: u64,
    wall_s: f64,
    cpu_s: f64,
    peak_rss_mib: f64,
    peak_state_rows: u64,
    peak_state_mib: f64,
    #[serde(default)]
    checkpoints: u64,
    #[serde(default)]
    checkpoint_max_ms: i64,
    #[serde(default)]
    checkpoint_last_bytes: u64,
    /// The longest an operator was held up taking a snapshot.
    #[serde(default)]
    checkpoint_max_sync_ms: i64,
    /// Bytes all checkpoints wrote.
    #[serde(default)]
    checkpoint_written_bytes: u64,
}

fn default_rows(job: BenchJob) -> u64 {
    match job {
        BenchJob::Count => 10_000_000,
        BenchJob::WindowCount
        | BenchJob::WindowCountTwoPhase
        | BenchJob::WindowCountSalted
        | BenchJob::SqlWindowCount => 2_000_000,
        _ => 1_000_000,
    }
}

/// The generator tables a job reads, by name.
fn tables(job: BenchJob, rows: u64, splits: usize) -> Vec<(&'static str, GeneratorSpec)> {
    match job {
        BenchJob::Count
        | BenchJob::WindowCount
        | BenchJob::WindowCountTwoPhase
        | BenchJob::WindowCountSalted
        | BenchJob::SqlWindowCount => {
            vec![("events", GeneratorSpec::events(rows).with_splits(splits))]
        }
        BenchJob::IntervalJoin => vec![
            ("clicks", GeneratorSpec::clicks(rows).with_splits(splits)),
            (
                "impressions",
                GeneratorSpec::impressions(rows).with_splits(splits),
            ),
        ],
        BenchJob::TemporalJoin => {
            let versions = 20_000;
            let orders = GeneratorSpec::orders(rows).with_splits(splits);
            let eps = (orders.events_per_sec * versions / rows.max(1)).max(1);
            vec![
                ("orders", orders),
                (
                    "rates",
                    GeneratorSpec {
                        events_per_sec: eps,
                        ..GeneratorSpec::rates(versions).with_splits(splits)
                    },
                ),
            ]
        }
        BenchJob::Latency | BenchJob::All => vec![],
    }
}

/// `--state-backend`, `--memory-budget` and `--memory-first` as a job's state backend.
pub(crate) fn state_backend(a: &BenchArgs) -> Result<weir_state::backend::StateBackend> {
    use weir_state::backend::{parse_memory_first, parse_size, BackendKind, StateBackend};
    let kind =
        BackendKind::parse(&a.state_backend).map_err(|e| anyhow::anyhow!("--state-backend {e}"))?;
    let memory_budget = match &a.memory_budget {
        Some(v) => Some(parse_size(v).map_err(|e| anyhow::anyhow!("--memory-budget {e}"))?),
        None => None,
    };
    let memory_first = match &a.memory_first {
        Some(v) => parse_memory_first(v).map_err(|e| anyhow::anyhow!("--memory-first {e}"))?,
        None => None,
    };
    if (memory_budget.is_some() || a.memory_first.is_some()) && kind != BackendKind::RocksDb {
        anyhow::bail!("--memory-budget and --memory-first apply to --state-backend rocksdb");
    }
    if a.incremental && (kind != BackendKind::RocksDb || a.checkpoint_interval_ms.is_none()) {
        anyhow::bail!("--incremental applies to --state-backend rocksdb with checkpoints");
    }
    Ok(StateBackend {
        kind,
        memory_budget,
        memory_first,
        incremental: a.incremental,
        ..Default::default()
    })
}

fn build(
    a: &BenchArgs,
    job: BenchJob,
    sources: Vec<(&'static str, Box<dyn SourceFactory>)>,
) -> Result<JobGraph> {
    let cfg = JobConfig {
        parallelism: a.parallelism,
        batch_rows: a.batch_rows,
        checkpointing: a.checkpoint_interval_ms.map(|ms| {
            let name = format!("weir-bench-checkpoints-{}", std::process::id());
            weir_runtime::checkpoint::CheckpointConfig::new(
                ms,
                match &a.checkpoint_dir {
                    Some(d) => {
                        std::path::PathBuf::from(format!("{}/{name}", d.trim_end_matches('/')))
                    }
                    None => std::env::temp_dir().join(name),
                },
            )
        }),
        state_backend: state_backend(a)?,
        ..Default::default()
    };
    let b = JobBuilder::with_config(format!("bench {job:?}"), cfg);
    let streams: Vec<Stream> = sources
        .into_iter()
        .map(|(name, s)| {
            let mut opts = SourceOptions::event_time("ts", 5_000);
            if let Some(drift) = a.align_drift_ms {
                let mut al = WatermarkAlignment::new("bench", drift);
                al.update_interval_ms = a.align_interval_ms;
                al.buffer_size = a.align_buffer;
                opts = opts.aligned(al);
            }
            b.source_arc(name, s.into(), opts)
        })
        .collect();
    let out = match job {
        BenchJob::Count => streams[0].key_by(&["key"]).count(),
        BenchJob::WindowCount | BenchJob::WindowCountTwoPhase | BenchJob::WindowCountSalted => {
            let strategy = match job {
                BenchJob::WindowCountTwoPhase => AggStrategy::TwoPhase,
                BenchJob::WindowCountSalted => AggStrategy::Salted {
                    salts: a.parallelism as u16,
                    hot_share: Some(0.1),
                },
                _ => AggStrategy::OnePhase,
            };
            streams[0].key_by(&["key"]).window_aggregate_with(
                WindowAggregate::tumbling(60_000).aggregate(count("cnt")),
                strategy,
            )
        }
        BenchJob::IntervalJoin => streams[0].key_by(&["ad_id", "user_id"]).interval_join(
            &streams[1].key_by(&["ad_id", "user_id"]),
            IntervalJoin::between(-10_000, 0).aliases("c", "i"),
        ),
        BenchJob::TemporalJoin => streams[0].key_by(&["currency"]).temporal_join(
            &streams[1].key_by(&["currency"]),
            TemporalJoin::new().aliases("o", "r"),
        ),
        BenchJob::SqlWindowCount | BenchJob::Latency | BenchJob::All => bail!("not a builder job"),
    };
    out.sink("out", BlackholeSink);
    Ok(b.build()?)
}

/// The SQL window count over the generator's events (the spec's settings as `generator.*`
/// options) or over CSV files matching `csv`.
fn sql_window_count(a: &BenchArgs, events: &GeneratorSpec, csv: Option<&str>) -> Result<JobGraph> {
    let with = match csv {
        Some(path) => format!(
            "'connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv', 'csv.header' = 'true'"
        ),
        None => {
            let mut opts = vec!["'connector' = 'weir-generator'".to_string()];
            if let serde_json::Value::Object(m) = serde_json::to_value(events)? {
                for (k, v) in m {
                    let v = match v {
                        serde_json::Value::Null => continue,
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    opts.push(format!("'generator.{k}' = '{v}'"));
                }
            }
            opts.join(", ")
        }
    };
    let sql = format!(
        "CREATE TABLE events (`key` STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
           WATERMARK FOR rt AS rt - INTERVAL '5' SECOND) WITH ({with});
         CREATE TABLE counts (`key` STRING, window_start BIGINT, cnt BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO counts
         SELECT `key`, UNIX_TIMESTAMP(DATE_FORMAT(window_start, 'yyyy-MM-dd HH:mm:ss')) * 1000, COUNT(*)
         FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
         GROUP BY `key`, window_start, window_end;"
    );
    let opts = weir_sql::PlanOptions {
        vars: Default::default(),
        parallelism: Some(a.parallelism),
        ..Default::default()
    };
    Ok(weir_sql::plan_job(&sql, &opts)?)
}

/// Writes the job's tables as CSV, one file per subtask: `<table>-<i>.csv`.
async fn write_csv(
    dir: &Path,
    specs: &[(&'static str, GeneratorSpec)],
    parallelism: usize,
) -> Result<()> {
    let w = JobBuilder::with_config(
        "bench input",
        JobConfig {
            parallelism,
            ..Default::default()
        },
    );
    for (name, spec) in specs {
        w.source(
            *name,
            GeneratorSource::new(spec.clone())?,
            SourceOptions::none(),
        )
        .sink(
            format!("{name} csv"),
            FileSink::new(dir.join(format!("{name}.csv")), FileFormat::Csv),
        );
    }
    weir_runtime::exec::run(w.build()?, std::sync::Arc::new(weir_core::SystemClock)).await?;
    Ok(())
}

async fn measure_one(a: &BenchArgs, job: BenchJob, input: BenchInput) -> Result<Measured> {
    let rows = a.rows.unwrap_or(default_rows(job));
    let specs = tables(job, rows, a.parallelism);
    let mut tmp = None;
    let mut csv_patterns: Vec<String> = Vec::new();
    let sources: Vec<(&'static str, Box<dyn SourceFactory>)> = match input {
        BenchInput::Generator => specs
            .iter()
            .map(|(n, s)| {
                Ok((
                    *n,
                    Box::new(GeneratorSource::new(s.clone())?) as Box<dyn SourceFactory>,
                ))
            })
            .collect::<Result<_>>()?,
        _ => {
            let dir = match &a.csv_dir {
                Some(d) => d.clone(),
                None => {
                    let t = TempDir::new()?;
                    let d = t.0.clone();
                    tmp = Some(t);
                    d
                }
            };
            write_csv(&dir, &specs, a.parallelism).await?;
            specs
                .iter()
                .map(|(n, s)| {
                    let pattern = if a.parallelism > 1 {
                        dir.join(format!("{n}-*.csv"))
                    } else {
                        dir.join(format!("{n}.csv"))
                    };
                    csv_patterns.push(pattern.to_string_lossy().into_owned());
                    let columns: Vec<(&str, DataType)> = Vec::new();
                    let mut spec =
                        FileSourceSpec::new(pattern.to_string_lossy(), FileFormat::Csv, columns);
                    spec.columns =
                        weir_connectors::file::ColumnSpec::of_schema(&schema_for(s.scenario));
                    Ok((
                        *n,
                        Box::new(FileSource::new(spec)?) as Box<dyn SourceFactory>,
                    ))
                })
                .collect::<Result<_>>()?
        }
    };
    let graph = match job {
        BenchJob::SqlWindowCount => {
            drop(sources);
            sql_window_count(a, &specs[0].1, csv_patterns.first().map(String::as_str))?
        }
        _ => build(a, job, sources)?,
    };
    let checkpoint_dir = graph.config.checkpointing.as_ref().map(|c| c.dir.clone());
    let cpu0 = procstat::cpu_seconds();
    let report =
        weir_runtime::exec::run(graph, std::sync::Arc::new(weir_core::SystemClock)).await?;
    let cpu_s = procstat::cpu_seconds() - cpu0;
    drop(tmp);
    if let Some(d) = checkpoint_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    let m = &report.metrics;
    Ok(Measured {
        job,
        input,
        rows_in: m
            .nodes
            .iter()
            .filter(|n| n.kind.starts_with("source"))
            .map(|n| n.rows_out)
            .sum(),
        rows_out: m
            .nodes
            .iter()
            .filter(|n| n.kind.starts_with("sink"))
            .map(|n| n.rows_in)
            .sum(),
        wall_s: report.elapsed_ms.max(1) as f64 / 1000.0,
        cpu_s,
        peak_rss_mib: procstat::peak_rss_bytes() as f64 / (1 << 20) as f64,
        peak_state_rows: m.nodes.iter().map(|n| n.peak_state_rows).sum(),
        peak_state_mib: m.nodes.iter().map(|n| n.peak_state_bytes).sum::<u64>() as f64
            / (1 << 20) as f64,
        checkpoints: m.checkpoints.completed,
        checkpoint_max_ms: m.checkpoints.max_duration_ms,
        checkpoint_last_bytes: m.checkpoints.last_bytes,
        checkpoint_max_sync_ms: m.checkpoints.max_sync_ms,
        checkpoint_written_bytes: m.checkpoints.written_bytes_total,
    })
}

pub async fn run(a: BenchArgs) -> Result<()> {
    if a.job == BenchJob::Latency {
        if a.json {
            let rate = a.rate.context("--rate is set for a latency run")?;
            let m = latency::measure(&a, rate).await?;
            println!("{}", serde_json::to_string(&m)?);
            return Ok(());
        }
        return latency::run(&a).await;
    }
    let jobs = match a.job {
        BenchJob::All => vec![
            BenchJob::Count,
            BenchJob::IntervalJoin,
            BenchJob::TemporalJoin,
            BenchJob::WindowCount,
            BenchJob::WindowCountTwoPhase,
            BenchJob::WindowCountSalted,
            BenchJob::SqlWindowCount,
        ],
        j => vec![j],
    };
    let inputs = match a.input {
        BenchInput::Both => vec![BenchInput::Generator, BenchInput::Csv],
        BenchInput::Kafka => bail!("--input kafka is for --job latency only"),
        i => vec![i],
    };
    if a.json {
        let m = measure_one(&a, jobs[0], inputs[0]).await?;
        println!("{}", serde_json::to_string(&m)?);
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let mut results = Vec::new();
    for &job in &jobs {
        for &input in &inputs {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "bench",
                "--json",
                "--parallelism",
                &a.parallelism.to_string(),
                "--batch-rows",
                &a.batch_rows.to_string(),
            ]);
            cmd.args(["--job", &value(&job), "--input", &value(&input)]);
            if let Some(r) = a.rows {
                cmd.args(["--rows", &r.to_string()]);
            }
            if let Some(d) = &a.csv_dir {
                cmd.arg("--csv-dir").arg(d);
            }
            if let Some(drift) = a.align_drift_ms {
                cmd.args(["--align-drift-ms", &drift.to_string()]);
                cmd.args(["--align-interval-ms", &a.align_interval_ms.to_string()]);
                cmd.args(["--align-buffer", &a.align_buffer.to_string()]);
            }
            if let Some(ms) = a.checkpoint_interval_ms {
                cmd.args(["--checkpoint-interval-ms", &ms.to_string()]);
            }
            if let Some(d) = &a.checkpoint_dir {
                cmd.args(["--checkpoint-dir", d]);
            }
            cmd.args(["--state-backend", &a.state_backend]);
            if let Some(b) = &a.memory_budget {
                cmd.args(["--memory-budget", b]);
            }
            if let Some(f) = &a.memory_first {
                cmd.args(["--memory-first", f]);
            }
            if a.incremental {
                cmd.arg("--incremental");
            }
            results.push(measured_by::<Measured>(
                cmd,
                &format!("{job:?} on {input:?}"),
            )?);
        }
    }
    println!(
        "weir bench: parallelism {}, batch {} rows, {} cores, state backend {}{}; each line a fresh process",
        a.parallelism,
        a.batch_rows,
        cores(),
        a.state_backend,
        [("budget", &a.memory_budget), ("memory first", &a.memory_first)]
            .iter()
            .filter_map(|(name, v)| v.as_ref().map(|v| format!(" ({name} {v})")))
            .collect::<String>()
    );
    println!(
        "{:<24} {:<10} {:>10} {:>9} {:>8} {:>12} {:>14} {:>10} {:>12} {:>11}",
        "job",
        "input",
        "rows in",
        "wall s",
        "cpu s",
        "rows/s",
        "rows/cpu-s",
        "rows out",
        "peak state",
        "peak RSS"
    );
    for r in &results {
        println!(
            "{:<24} {:<10} {:>10} {:>9.3} {:>8.2} {:>12.0} {:>14.0} {:>10} {:>7} rows {:>7.1} MiB",
            value(&r.job),
            value(&r.input),
            r.rows_in,
            r.wall_s,
            r.cpu_s,
            r.rows_in as f64 / r.wall_s,
            r.rows_in as f64 / r.cpu_s.max(0.01),
            r.rows_out,
            r.peak_state_rows,
            r.peak_rss_mib
        );
        if r.checkpoints > 0 {
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            println!(
                "{:<24} {} checkpoints, the longest {} ms (operators held up at most {} ms), \
                 the last {:.1} MiB of state, {:.1} MiB written per checkpoint",
                "",
                r.checkpoints,
                r.checkpoint_max_ms,
                r.checkpoint_max_sync_ms,
                mib(r.checkpoint_last_bytes),
                mib(r.checkpoint_written_bytes) / r.checkpoints as f64
            );
        }
    }
    Ok(())
}

/// The machine's cores, for the tables' headers (0 when unknown).
fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

/// Runs one measurement in a child process (`bench --json ...`) and reads what it printed.
fn measured_by<T: serde::de::DeserializeOwned>(mut cmd: Command, what: &str) -> Result<T> {
    let out = cmd.output().context("running a benchmark process")?;
    if !out.status.success() {
        bail!(
            "benchmark {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).context("reading a benchmark result")
}

fn value<T: clap::ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .expect("no skipped values")
        .get_name()
        .to_string()
}

/// A temporary folder removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self> {
        let p = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
