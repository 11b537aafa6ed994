//! `weir demo`: the ad-attribution scenario end to end on generated data.
//!
//! Impressions and clicks come from the generator with event time and 5 s watermarks; late
//! rows are set aside per split and written to their own files; the rest is counted per ad.
//! (The interval and temporal joins replace the counts once they land.)

use std::path::PathBuf;

use anyhow::Result;
use weir_connectors::file::{FileFormat, FileSink};
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_operators::KeyedStreamExt;
use weir_runtime::{JobBuilder, JobConfig, JobGraph, SourceOptions};

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Impressions to generate (clicks follow: about 30 % of them, plus orphans).
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Where the results go.
    #[arg(long, default_value = "weir-demo-out")]
    pub out: PathBuf,
    /// Share of rows that arrive 10–120 s late.
    #[arg(long, default_value_t = 0.01)]
    pub late_share: f64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Write metrics as JSON to this file every second and at the end.
    #[arg(long)]
    pub metrics_out: Option<PathBuf>,
    /// Write the job graph as JSON to this file (run it with `weir run`) and stop.
    #[arg(long)]
    pub write_job: Option<PathBuf>,
}

/// The demo's job graph.
pub fn job(a: &DemoArgs) -> Result<JobGraph> {
    let cfg = JobConfig {
        parallelism: a.parallelism,
        dead_letter_path: Some(a.out.join("dead-letters.jsonl")),
        ..Default::default()
    };
    let job = JobBuilder::with_config("ad-attribution demo", cfg);
    let spec = |s: GeneratorSpec| GeneratorSpec {
        seed: a.seed,
        late_share: a.late_share,
        splits: a.parallelism,
        ..s
    };
    let csv = |name: &str| FileSink::new(a.out.join(format!("{name}.csv")), FileFormat::Csv);
    for (name, s) in [
        ("impressions", GeneratorSpec::impressions(a.rows)),
        ("clicks", GeneratorSpec::clicks(a.rows)),
    ] {
        let on_time = job
            .source(
                name,
                GeneratorSource::new(spec(s))?,
                SourceOptions::event_time("ts", 5_000),
            )
            .drop_late();
        on_time.late_rows().sink_arc(
            format!("late {name}"),
            std::sync::Arc::new(csv(&format!("late_{name}"))),
            Some(1),
        );
        on_time.key_by(&["ad_id"]).count().sink_arc(
            format!("{name} per ad"),
            std::sync::Arc::new(csv(&format!("{name}_per_ad"))),
            Some(1),
        );
    }
    Ok(job.build()?)
}

pub async fn run(a: DemoArgs) -> Result<()> {
    let graph = job(&a)?;
    if let Some(path) = &a.write_job {
        std::fs::write(path, serde_json::to_vec_pretty(&graph.to_json())?)?;
        eprintln!(
            "wrote the job graph to {} (run it with: weir run {})",
            path.display(),
            path.display()
        );
        return Ok(());
    }
    eprint!("{graph}");
    let report = crate::supervise::run(graph, a.metrics_out.as_deref(), true).await?;
    println!(
        "ad-attribution demo: {} impressions at parallelism {}",
        a.rows, a.parallelism
    );
    print!("{}", crate::supervise::summary(&report));
    println!(
        "results in {}/ (impressions_per_ad.csv, clicks_per_ad.csv, late_*.csv)",
        a.out.display()
    );
    Ok(())
}
