//! Reads a CSV file with malformed records: good rows go on, bad ones land in the
//! dead-letter file with the reason and the line.
//!
//! Run: `cargo run -p weir-cli --example 02_dead_letters`

use std::sync::Arc;

use arrow_schema::DataType;
use weir_connectors::file::{FileFormat, FileSource, FileSourceSpec};
use weir_connectors::stdout::StdoutSink;
use weir_core::SystemClock;
use weir_runtime::{exec, JobBuilder, JobConfig, SourceOptions};

fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let input = dir.join("clicks.csv");
    std::fs::write(
        &input,
        "click_id,ad_id,ts\n1,10,1000\n2,ten,2000\n3,10\n4,11,4000\n",
    )?;

    let dead = dir.join("dead-letters.jsonl");
    let job = JobBuilder::with_config(
        "dead letters",
        JobConfig {
            dead_letter_path: Some(dead.clone()),
            ..Default::default()
        },
    );
    let spec = FileSourceSpec::new(
        input.to_string_lossy(),
        FileFormat::Csv,
        vec![
            ("click_id", DataType::Int64),
            ("ad_id", DataType::Int64),
            ("ts", DataType::Int64),
        ],
    );
    job.source(
        "clicks",
        FileSource::new(spec)?,
        SourceOptions::event_time("ts", 5_000),
    )
    .sink("stdout", StdoutSink);
    let report = exec::runtime()?.block_on(exec::run(job.build()?, Arc::new(SystemClock)))?;

    println!(
        "\n{} dead letters in {}:",
        report.dead_letters,
        dead.display()
    );
    print!("{}", std::fs::read_to_string(&dead)?);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
