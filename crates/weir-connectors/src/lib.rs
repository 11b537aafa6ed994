//! # weir-connectors
//!
//! Sources and sinks on embedded defaults, so a new user needs nothing installed: files
//! ([`file`]: CSV, JSON lines, Parquet; one split per file; bad records to the dead-letter
//! output), the data [`generator`] for weir's scenarios, and [`stdout`]. Production connectors
//! (Kafka, PostgreSQL) will come behind cargo features.
//!
//! ```no_run
//! use arrow_schema::DataType;
//! use weir_connectors::file::{FileFormat, FileSource, FileSourceSpec};
//!
//! let clicks = FileSource::new(FileSourceSpec::new(
//!     "data/clicks-*.csv",
//!     FileFormat::Csv,
//!     vec![("click_id", DataType::Int64), ("ad_id", DataType::Int64), ("ts", DataType::Int64)],
//! ))?;
//! # Ok::<(), weir_runtime::Error>(())
//! ```

#![warn(clippy::unwrap_used)]
pub(crate) mod csv_text;
pub mod file;
pub mod generator;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kafka")]
pub mod repartition;
pub mod stdout;
pub(crate) mod values;

use std::sync::Arc;
use weir_runtime::graph::{spec_from_json, Registry};

/// Registers this crate's sources and sinks, so job graphs using them can be read from JSON.
pub fn register(r: &mut Registry) {
    r.add_source("file", |s| {
        Ok(Arc::new(file::FileSource::new(spec_from_json("file", s)?)?))
    });
    r.add_sink("file", |s| {
        Ok(Arc::new(file::FileSink {
            spec: spec_from_json("file", s)?,
        }))
    });
    r.add_sink("stdout", |_| Ok(Arc::new(stdout::StdoutSink)));
    generator::register(r);
    #[cfg(feature = "kafka")]
    {
        r.add_source("kafka", |s| {
            Ok(Arc::new(kafka::KafkaSource::new(spec_from_json(
                "kafka", s,
            )?)?))
        });
        r.add_sink("kafka", |s| {
            Ok(Arc::new(kafka::KafkaSink {
                spec: spec_from_json("kafka", s)?,
            }))
        });
        r.add_source("repartition", |s| {
            Ok(Arc::new(repartition::RepartitionSource::new(
                spec_from_json("repartition", s)?,
            )))
        });
        r.add_sink("repartition", |s| {
            Ok(Arc::new(repartition::RepartitionSink {
                spec: spec_from_json("repartition", s)?,
            }))
        });
    }
}
