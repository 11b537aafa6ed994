//! `weir`: run, inspect and benchmark stream jobs.

mod bench;
mod demo;
mod gen;
mod procstat;
mod supervise;

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
    /// Run a job graph (JSON, as written by `weir demo --write-job`) to the end of its input.
    Run {
        /// The job file.
        job: PathBuf,
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
    },
    /// Print a job graph: nodes, partitioning of every edge, schemas, where each was created.
    Explain { job: PathBuf },
    /// Write generator data to files.
    Gen(gen::GenArgs),
    /// Run the ad-attribution scenario on generated data and print a summary.
    Demo(demo::DemoArgs),
    /// Measure throughput, CPU time and peak memory of a keyed count.
    Bench(bench::BenchArgs),
}

fn registry() -> weir_runtime::Registry {
    let mut r = weir_runtime::Registry::with_builtins();
    weir_operators::register(&mut r);
    weir_connectors::register(&mut r);
    r
}

fn read_job(path: &PathBuf) -> Result<weir_runtime::JobGraph> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading job file {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "sql") {
        anyhow::bail!(
            "{} is a SQL job; the SQL front end is not built yet. Run a job graph in JSON (see `weir demo --write-job`)",
            path.display()
        );
    }
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    Ok(weir_runtime::JobGraph::from_json(&value, &registry())?)
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Run {
            job,
            parallelism,
            metrics_out,
            dead_letters,
            allow_misaligned_start,
        } => {
            let mut graph = read_job(&job)?;
            graph.config.allow_misaligned_start |= allow_misaligned_start;
            if let Some(p) = parallelism {
                graph.config.parallelism = p;
                for n in &mut graph.nodes {
                    n.parallelism = p;
                }
            }
            if dead_letters.is_some() {
                graph.config.dead_letter_path = dead_letters;
            }
            if graph.config.dead_letter_path.is_none() {
                graph.config.dead_letter_path = Some(PathBuf::from("weir-dead-letters.jsonl"));
            }
            let report = rt.block_on(supervise::run(graph, metrics_out.as_deref(), true))?;
            eprint!("{}", supervise::summary(&report));
        }
        Command::Explain { job } => print!("{}", read_job(&job)?),
        Command::Gen(args) => rt.block_on(gen::run(args))?,
        Command::Demo(args) => rt.block_on(demo::run(args))?,
        Command::Bench(args) => rt.block_on(bench::run(args))?,
    }
    Ok(())
}
