//! Helpers for tests against a Kafka-protocol broker: `scripts/test` starts one (tansu) and
//! names it in `WEIR_KAFKA_BOOTSTRAP`; such tests are `#[ignore]`d for a plain `cargo test`.
//!
//! A broker on a slow or loaded machine can be many times slower than on a quiet one, and a
//! stuck one never answers: every wait on the broker goes through [`within`], which fails the
//! test after [`BROKER_PATIENCE`] saying what it waited for, instead of running until CI's own
//! limit stops everything.

use std::future::Future;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

/// The broker's address.
///
/// # Panics
/// When `WEIR_KAFKA_BOOTSTRAP` is not set, saying how to run the test.
pub fn bootstrap() -> String {
    std::env::var("WEIR_KAFKA_BOOTSTRAP")
        .expect("WEIR_KAFKA_BOOTSTRAP is not set: run the Kafka tests with scripts/test, which starts a broker")
}

/// A runtime for the tests' jobs and admin calls.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// How long a test waits for one step against the broker (producing or reading a topic, a job
/// over it) before it fails. Generous: the steps take seconds on a quiet machine.
pub const BROKER_PATIENCE: Duration = Duration::from_secs(180);

/// Runs `step` on `rt`, failing the test if it takes longer than [`BROKER_PATIENCE`].
///
/// # Panics
/// After [`BROKER_PATIENCE`], naming `what` (the step: "reading 3,000 records of topic t") and
/// the broker.
pub fn within<T>(rt: &tokio::runtime::Runtime, what: &str, step: impl Future<Output = T>) -> T {
    rt.block_on(async { tokio::time::timeout(BROKER_PATIENCE, step).await })
        .unwrap_or_else(|_| {
            panic!(
                "gave up after {} s waiting for {what} against the broker at {}: it is stuck or \
                 far slower than expected (scripts/test keeps its log)",
                BROKER_PATIENCE.as_secs(),
                bootstrap()
            )
        })
}

/// A fresh topic with `partitions` partitions, named `name` plus a suffix unique to the run.
///
/// # Panics
/// When the broker refuses.
pub fn topic(rt: &tokio::runtime::Runtime, name: &str, partitions: i32) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("an admin client");
    let t = NewTopic::new(&name, partitions, TopicReplication::Fixed(1));
    let created = rt
        .block_on(admin.create_topics(
            [&t],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .expect("create topics");
    for r in created {
        r.expect("topic created");
    }
    name
}
