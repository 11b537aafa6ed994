//! Counts generated events per key with the Rust builder API and prints the largest counts.
//!
//! Run: `cargo run --release -p weir-cli --example 01_keyed_count`

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_core::SystemClock;
use weir_operators::KeyedStreamExt;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};

fn main() -> anyhow::Result<()> {
    let job = JobBuilder::with_config(
        "keyed count",
        JobConfig {
            parallelism: 2,
            ..Default::default()
        },
    );
    let counts = CollectSink::new();
    // 1 M events, 80 % of them with the key `celebrity`, in 2 splits; 5 s watermarks on `ts`.
    let events = GeneratorSource::new(GeneratorSpec::events(1_000_000).with_splits(2))?;
    job.source("events", events, SourceOptions::event_time("ts", 5_000))
        .key_by(&["key"])
        .count()
        .sink("counts", counts.clone());
    let graph = job.build()?;
    print!("{graph}");

    let report = exec::runtime()?.block_on(exec::run(graph, Arc::new(SystemClock)))?;

    let mut rows: Vec<(String, i64)> = Vec::new();
    for b in counts.batches() {
        let (keys, n) = (
            b.column(0).as_string::<i32>(),
            b.column(1).as_primitive::<Int64Type>(),
        );
        rows.extend((0..b.num_rows()).map(|i| (keys.value(i).to_string(), n.value(i))));
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    for (k, n) in rows.iter().take(5) {
        println!("{k:>10} {n}");
    }
    println!("{} keys in {} ms", rows.len(), report.elapsed_ms);
    Ok(())
}
