//! The sink in running jobs, with and without checkpoints.

mod common;

use std::sync::Arc;

use common::*;
use weir_core::time::SystemClock;
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::sink::{RateLimitHandle, RateLimitedSink};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, JobBuilder, JobConfig, SourceOptions};

/// 2,000 rows at 4,000 rows a second per subtask through 2 sink subtasks, checkpoints every
/// 40 ms: several checkpoints commit while the job runs, and the end commits the rest.
async fn job_writes_every_row_once(db: &Db, checkpoints: bool) {
    let dir = tempfile::tempdir().unwrap();
    let config = JobConfig {
        parallelism: 2,
        batch_rows: 50,
        checkpointing: checkpoints.then(|| CheckpointConfig::new(40, dir.path())),
        ..Default::default()
    };
    let job = JobBuilder::with_config("jdbc job", config);
    let sink = db.sink("numbers", 100);
    job.source("numbers", VecSource::numbers(2_000), SourceOptions::none())
        .sink_arc(
            "out",
            Arc::new(RateLimitedSink::new(
                Arc::new(sink),
                RateLimitHandle::new(2_000),
            )),
            Some(2),
        );
    let report = exec::run(job.build().unwrap(), Arc::new(SystemClock))
        .await
        .unwrap();
    if checkpoints {
        assert!(
            report.metrics.checkpoints.completed >= 2,
            "{:?}",
            report.metrics.checkpoints
        );
        assert_eq!(db.count(&staged_in("numbers")).await, 0);
    }
    assert_eq!(db.count("numbers").await, 2_000);
    assert_eq!(
        db.texts("SELECT CAST(count(DISTINCT n) AS TEXT) FROM numbers")
            .await,
        vec!["2000"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_job_without_checkpoints() {
    job_writes_every_row_once(&Db::sqlite(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_job_with_checkpoints() {
    job_writes_every_row_once(&Db::sqlite(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_job_with_checkpoints() {
    job_writes_every_row_once(&Db::postgres("job").await, true).await;
}
