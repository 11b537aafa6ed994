//! `weir bench`: throughput, CPU time and peak memory of a keyed count, from the generator and
//! from CSV files. Numbers vary with the machine and its load: compare runs made together.

use std::path::PathBuf;

use anyhow::Result;
use weir_connectors::file::{FileFormat, FileSink, FileSource, FileSourceSpec};
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_operators::KeyedStreamExt;
use weir_runtime::{CollectSink, JobBuilder, JobConfig, JobGraph, SourceOptions};

use crate::procstat;

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub enum BenchSource {
    Generator,
    Csv,
    Both,
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Events to count (80 % one hot key, the rest over 10,000 keys).
    #[arg(long, default_value_t = 10_000_000)]
    pub rows: u64,
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    #[arg(long, value_enum, default_value = "both")]
    pub source: BenchSource,
    /// Folder for the CSV input (default: a temporary folder, removed afterwards).
    #[arg(long)]
    pub csv_dir: Option<PathBuf>,
    /// Rows per batch.
    #[arg(long, default_value_t = 8192)]
    pub batch_rows: usize,
}

struct Measured {
    label: String,
    rows: u64,
    secs: f64,
    cpu: f64,
}

async fn measure(label: &str, graph: JobGraph) -> Result<Measured> {
    let cpu0 = procstat::cpu_seconds();
    let report =
        weir_runtime::exec::run(graph, std::sync::Arc::new(weir_core::SystemClock)).await?;
    let cpu = procstat::cpu_seconds() - cpu0;
    let rows = report
        .metrics
        .nodes
        .iter()
        .filter(|n| n.kind.starts_with("source"))
        .map(|n| n.rows_out)
        .sum();
    Ok(Measured {
        label: label.into(),
        rows,
        secs: report.elapsed_ms.max(1) as f64 / 1000.0,
        cpu,
    })
}

fn count_job(
    a: &BenchArgs,
    name: &str,
    source: impl weir_runtime::SourceFactory + 'static,
) -> Result<JobGraph> {
    let cfg = JobConfig {
        parallelism: a.parallelism,
        batch_rows: a.batch_rows,
        ..Default::default()
    };
    let job = JobBuilder::with_config(name, cfg);
    job.source("events", source, SourceOptions::event_time("ts", 5_000))
        .key_by(&["key"])
        .count()
        .sink("counts", CollectSink::new());
    Ok(job.build()?)
}

pub async fn run(a: BenchArgs) -> Result<()> {
    let mut results = Vec::new();
    let events = GeneratorSpec::events(a.rows).with_splits(a.parallelism);
    if a.source != BenchSource::Csv {
        let g = count_job(&a, "bench generator", GeneratorSource::new(events.clone())?)?;
        results.push(measure("generator -> keyed count", g).await?);
    }
    if a.source != BenchSource::Generator {
        let tmp;
        let dir = match &a.csv_dir {
            Some(d) => d.clone(),
            None => {
                tmp = TempDir::new()?;
                tmp.0.clone()
            }
        };
        // Write the input first (not measured): one file per subtask.
        let w = JobBuilder::with_config(
            "bench input",
            JobConfig {
                parallelism: a.parallelism,
                ..Default::default()
            },
        );
        w.source(
            "events",
            GeneratorSource::new(events.clone())?,
            SourceOptions::none(),
        )
        .sink(
            "csv",
            FileSink::new(dir.join("events.csv"), FileFormat::Csv),
        );
        weir_runtime::exec::run(w.build()?, std::sync::Arc::new(weir_core::SystemClock)).await?;
        let pattern = if a.parallelism > 1 {
            dir.join("events-*.csv")
        } else {
            dir.join("events.csv")
        };
        let spec = FileSourceSpec::new(
            pattern.to_string_lossy(),
            FileFormat::Csv,
            vec![
                ("key", arrow_schema::DataType::Utf8),
                ("ts", arrow_schema::DataType::Int64),
            ],
        );
        let g = count_job(&a, "bench csv", FileSource::new(spec)?)?;
        results.push(measure("csv files -> keyed count", g).await?);
    }
    println!(
        "weir bench: {} events, parallelism {}, batch {} rows, {} cores",
        a.rows,
        a.parallelism,
        a.batch_rows,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "{:<28} {:>12} {:>9} {:>14} {:>8} {:>16}",
        "job", "rows", "wall s", "rows/s", "cpu s", "rows/cpu-s"
    );
    for r in &results {
        println!(
            "{:<28} {:>12} {:>9.3} {:>14.0} {:>8.2} {:>16.0}",
            r.label,
            r.rows,
            r.secs,
            r.rows as f64 / r.secs,
            r.cpu,
            r.rows as f64 / r.cpu.max(0.01)
        );
    }
    println!(
        "peak RSS of the process: {:.1} MiB",
        procstat::peak_rss_bytes() as f64 / (1 << 20) as f64
    );
    Ok(())
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
