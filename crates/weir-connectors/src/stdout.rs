//! Prints rows to standard output as CSV (a header, then rows), for trying jobs out.

use std::io::Write;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use weir_runtime::sink::{BoxFuture, Delivery};
use weir_runtime::{Error, Result, SinkFactory, SinkWriter, SubtaskInfo};

use crate::csv_text::CsvEncoder;

/// A sink printing CSV to standard output.
#[derive(Debug, Clone, Default)]
pub struct StdoutSink;

impl SinkFactory for StdoutSink {
    fn kind(&self) -> &'static str {
        "stdout"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    /// Printed as they come: a restore prints the rows after its checkpoint again.
    fn delivery(&self, checkpoints: bool) -> Delivery {
        if checkpoints {
            Delivery::AtLeastOnce
        } else {
            Delivery::AtMostOnce
        }
    }
    fn create_writer(
        &self,
        _schema: SchemaRef,
        _info: &SubtaskInfo,
    ) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(StdoutWriter {
            encoder: CsvEncoder::new(b',', true),
        }))
    }
}

struct StdoutWriter {
    encoder: CsvEncoder,
}

impl SinkWriter for StdoutWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        let mut buf = Vec::new();
        let r = crate::values::flink_text(&batch)
            .and_then(|b| Ok(self.encoder.encode(&b, &mut buf)?));
        let r = r.and_then(|_| {
            std::io::stdout()
                .lock()
                .write_all(&buf)
                .map_err(|e| Error::io("stdout", e))
        });
        Box::pin(async move { r })
    }
    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        let r = std::io::stdout()
            .flush()
            .map_err(|e| Error::io("stdout", e));
        Box::pin(async move { r })
    }
}
