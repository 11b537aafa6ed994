//! `weir gen`: writes generator data to files.

use std::path::PathBuf;

use anyhow::Result;
use weir_connectors::file::FileSink;
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_runtime::{JobBuilder, JobConfig, SourceOptions};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum GenScenario {
    /// impressions and clicks (the interval join's inputs)
    AdClicks,
    /// orders and versioned FX rates (the temporal join's inputs)
    Fx,
    /// keyed events with one hot key (the hot-key aggregation's input)
    HotKeys,
}

#[derive(clap::Args, Debug)]
pub struct GenArgs {
    pub scenario: GenScenario,
    /// Folder to write into (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Rows of the main table: impressions (clicks follow from them), orders, or events.
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// Rate versions for `fx` (default: rows / 10).
    #[arg(long)]
    pub rate_versions: Option<u64>,
    #[arg(long, value_parser = ["csv", "json", "parquet"], default_value = "csv")]
    pub format: String,
    /// Files per table (each file is one split when read back).
    #[arg(long, default_value_t = 1)]
    pub files: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Share of rows delayed 10–120 s behind their neighbours (late for a 5 s watermark).
    #[arg(long, default_value_t = 0.0)]
    pub late_share: f64,
    /// Share of events with the hot key.
    #[arg(long, default_value_t = 0.8)]
    pub hot_key_share: f64,
}

/// The tables a scenario writes, as generator settings.
pub fn tables(a: &GenArgs) -> Vec<GeneratorSpec> {
    let base = |s: GeneratorSpec| GeneratorSpec {
        seed: a.seed,
        late_share: a.late_share,
        hot_key_share: a.hot_key_share,
        splits: a.files,
        ..s
    };
    match a.scenario {
        GenScenario::AdClicks => vec![
            base(GeneratorSpec::impressions(a.rows)),
            base(GeneratorSpec::clicks(a.rows)),
        ],
        GenScenario::Fx => {
            let versions = a.rate_versions.unwrap_or((a.rows / 10).max(1));
            let orders = base(GeneratorSpec::orders(a.rows));
            // Spread the rate versions over the same event-time span as the orders.
            let eps = (orders.events_per_sec as u128 * versions as u128 / a.rows.max(1) as u128)
                .max(1) as u64;
            vec![
                orders,
                GeneratorSpec {
                    events_per_sec: eps,
                    ..base(GeneratorSpec::rates(versions))
                },
            ]
        }
        GenScenario::HotKeys => vec![base(GeneratorSpec::events(a.rows))],
    }
}

pub async fn run(a: GenArgs) -> Result<()> {
    let format = weir_connectors::file::FileFormat::parse(&a.format)?;
    let job = JobBuilder::with_config(
        "gen",
        JobConfig {
            parallelism: a.files,
            ..Default::default()
        },
    );
    let mut written = Vec::new();
    for spec in tables(&a) {
        let name = spec.scenario.name();
        let path = a.out.join(format!("{name}.{}", format.extension()));
        let sink = FileSink::new(&path, format);
        written.extend((0..a.files).map(|i| sink.subtask_path(i, a.files)));
        job.source(name, GeneratorSource::new(spec)?, SourceOptions::none())
            .sink(format!("{name} file"), sink);
    }
    let report = crate::supervise::run(job.build()?, None, crate::supervise::Progress::Input, None)
        .await?
        .finished();
    let rows: u64 = report
        .metrics
        .nodes
        .iter()
        .filter(|n| n.kind.starts_with("sink"))
        .map(|n| n.rows_in)
        .sum();
    eprintln!("wrote {rows} rows to:");
    for p in written {
        eprintln!("  {}", p.display());
    }
    Ok(())
}
