//! `weir demo`: the ad-attribution pipeline end to end on generated data and embedded defaults.
//!
//! Impressions, clicks and FX rate versions come from the generator (event time, 5 s
//! watermarks); the ads table (each ad's currency and price per click) is written to the output
//! folder as CSV and read back. Clicks are attributed to an impression of the same ad and user
//! at most 10 s earlier (interval join), priced with their ad's terms (temporal join on the ads
//! table) and converted with the FX rate valid at the click's event time (temporal join on the
//! rates), and counted per ad. Late rows are set aside per input into their own files.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use arrow_schema::DataType;
use weir_connectors::file::{FileFormat, FileSink, FileSource, FileSourceSpec};
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_core::expr::col;
use weir_core::watermark::WatermarkStrategy;
use weir_operators::{
    IntervalJoin, IntervalJoinExt, KeyedStreamExt, TemporalJoin, TemporalJoinExt,
};
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
    #[command(flatten)]
    pub http: crate::web::HttpArgs,
}

/// Ads 1..=500: currency `C<ad % 20>` and a price per click, valid from the epoch on.
fn ads_csv() -> String {
    let mut s = String::from("ad_id,currency,cpc,ts\n");
    for ad in 1..=weir_connectors::generator::AD_IDS {
        let cents = 5 + (ad * 37) % 100;
        let _ = writeln!(
            s,
            "{ad},C{:03},{}.{:02},0",
            ad % 20,
            cents / 100,
            cents % 100
        );
    }
    s
}

/// The demo's job graph (writes the ads table into the output folder).
pub fn job(a: &DemoArgs) -> Result<JobGraph> {
    std::fs::create_dir_all(&a.out)?;
    let ads_path = a.out.join("ads.csv");
    std::fs::write(&ads_path, ads_csv())?;

    let cfg = JobConfig {
        parallelism: a.parallelism,
        dead_letter_path: Some(a.out.join("dead-letters.jsonl")),
        ..Default::default()
    };
    let job = JobBuilder::with_config("ad-attribution demo", cfg);
    // A fixed number of splits, whatever the parallelism: lateness is decided per split, so the
    // same splits give the same results at any parallelism.
    let gen = |s: GeneratorSpec| GeneratorSpec {
        seed: a.seed,
        late_share: a.late_share,
        splits: 4,
        ..s
    };
    let csv = |name: &str| {
        Arc::new(FileSink::new(
            a.out.join(format!("{name}.csv")),
            FileFormat::Csv,
        ))
    };
    // The results also go into a SQLite file, the embedded default database (replaced on each
    // run, as the CSV files are).
    let db = results_db(a);
    match std::fs::remove_file(&db) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let sqlite = |table: &str, key: Option<&str>| -> Result<Arc<dyn weir_runtime::SinkFactory>> {
        let options = std::collections::BTreeMap::from([
            ("url".to_string(), format!("jdbc:sqlite:{}", db.display())),
            ("table-name".to_string(), table.to_string()),
        ]);
        let sink =
            weir_jdbc::JdbcSinkFactory::from_options(&options, "ad-attribution demo", table)?;
        Ok(Arc::new(match key {
            Some(k) => sink.with_primary_key([k]),
            None => sink,
        }))
    };
    let wm = || SourceOptions::event_time("ts", 5_000);

    let impressions = job.source(
        "impressions",
        GeneratorSource::new(gen(GeneratorSpec::impressions(a.rows)))?,
        wm(),
    );
    let clicks = job.source(
        "clicks",
        GeneratorSource::new(gen(GeneratorSpec::clicks(a.rows)))?,
        wm(),
    );
    // 20 k rate versions per 1 M impressions, over the same event-time span.
    let versions = (a.rows / 50).max(20);
    let rates_spec = gen(GeneratorSpec::rates(versions));
    let rates_spec = GeneratorSpec {
        events_per_sec: (rates_spec.events_per_sec * versions / a.rows.max(1)).max(1),
        ..rates_spec
    };
    let rates = job.source("rates", GeneratorSource::new(rates_spec)?, wm());
    let ads = job.source(
        "ads",
        FileSource::new(FileSourceSpec::new(
            ads_path.to_string_lossy(),
            FileFormat::Csv,
            vec![
                ("ad_id", DataType::Int64),
                ("currency", DataType::Utf8),
                ("cpc", DataType::Decimal128(8, 2)),
                ("ts", DataType::Int64),
            ],
        ))?,
        // Every ad is valid from the epoch on: equal times are no disorder.
        SourceOptions::event_time("ts", 0)
            .strategy(WatermarkStrategy::Monotonous)
            .parallelism(1),
    );

    let attributed = clicks.key_by(&["ad_id", "user_id"]).interval_join(
        &impressions.key_by(&["ad_id", "user_id"]),
        IntervalJoin::between(-10_000, 0).aliases("c", "i"),
    );
    attributed
        .late_rows_of(0)
        .sink_arc("late clicks", csv("late_clicks"), Some(1));
    attributed
        .late_rows_of(1)
        .sink_arc("late impressions", csv("late_impressions"), Some(1));
    let attributed = attributed.project([
        ("click_id", col("click_id")),
        ("impression_id", col("impression_id")),
        ("ad_id", col("c_ad_id")),
        ("click_ts", col("c_ts")),
    ]);
    let per_ad = attributed.key_by(&["ad_id"]).count();
    per_ad.sink_arc("clicks per ad", csv("clicks_per_ad"), Some(1));
    per_ad.sink_arc(
        "clicks per ad (SQLite)",
        sqlite("clicks_per_ad", Some("ad_id"))?,
        Some(1),
    );

    let priced = attributed
        .key_by(&["ad_id"])
        .temporal_join(
            &ads.key_by(&["ad_id"]),
            TemporalJoin::new().aliases("c", "a"),
        )
        .project([
            ("click_id", col("click_id")),
            ("impression_id", col("impression_id")),
            ("ad_id", col("c_ad_id")),
            ("currency", col("currency")),
            ("cpc", col("cpc")),
            ("click_ts", col("click_ts")),
        ]);
    let revenue = priced.key_by(&["currency"]).temporal_join(
        &rates.key_by(&["currency"]),
        TemporalJoin::new().aliases("p", "r"),
    );
    revenue
        .late_rows_of(1)
        .sink_arc("late rates", csv("late_rates"), Some(1));
    let revenue = revenue.project([
        ("click_id", col("click_id")),
        ("impression_id", col("impression_id")),
        ("ad_id", col("ad_id")),
        ("currency", col("p_currency")),
        ("cpc", col("cpc")),
        ("rate", col("rate").cast(DataType::Decimal128(12, 6))),
        (
            "revenue_eur",
            col("cpc").mul(col("rate").cast(DataType::Decimal128(12, 6))),
        ),
        ("click_ts", col("click_ts")),
    ]);
    revenue.sink_arc("revenue per click", csv("revenue_per_click"), Some(1));
    revenue.sink_arc(
        "revenue per click (SQLite)",
        sqlite("revenue_per_click", None)?,
        Some(1),
    );
    Ok(job.build()?)
}

/// The SQLite file the demo writes its results into.
fn results_db(a: &DemoArgs) -> std::path::PathBuf {
    a.out.join("results.db")
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
    let listeners = crate::supervise::Listeners::install()?;
    let web = crate::web::Web::start(&a.http, &graph, None).await?;
    let result = crate::supervise::run_restarting(
        graph,
        a.metrics_out.as_deref(),
        crate::supervise::Progress::Input,
        web.as_ref().map(crate::web::Web::view),
        &listeners,
    )
    .await
    .map(crate::supervise::Supervised::ended);
    if let Ok((report, None)) = &result {
        print_results(&a, report);
    }
    if let Some(web) = web {
        web.finish(&listeners).await;
    }
    if let (_, Some(code)) = result? {
        std::process::exit(code);
    }
    Ok(())
}

/// What the demo computed and where it is.
fn print_results(a: &DemoArgs, report: &weir_runtime::exec::JobReport) {
    println!(
        "ad-attribution demo: {} impressions at parallelism {}",
        a.rows, a.parallelism
    );
    print!("{}", crate::supervise::summary(report));
    for n in &report.metrics.nodes {
        if n.kind.starts_with("operator") && !n.gauges.is_empty() {
            let g: Vec<String> = n
                .gauges
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("peak") || k.starts_with("late") || k.starts_with("unmatched")
                })
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            println!("  {:<18} {}", n.name, g.join(", "));
        }
    }
    println!(
        "results in {}/: revenue_per_click.csv, clicks_per_ad.csv, late_*.csv",
        a.out.display()
    );
    println!(
        "and in the SQLite file {0} (tables revenue_per_click, clicks_per_ad); try:\n  \
         sqlite3 {0} \"SELECT currency, COUNT(*) AS clicks, SUM(revenue_eur) AS revenue_eur \
         FROM revenue_per_click GROUP BY currency ORDER BY revenue_eur DESC\"",
        results_db(a).display()
    );
}
