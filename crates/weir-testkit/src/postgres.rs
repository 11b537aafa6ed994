//! Helpers for tests against PostgreSQL: `scripts/test` starts a throwaway cluster and names it
//! in `WEIR_POSTGRES_URL`; such tests are `#[ignore]`d for a plain `cargo test`.
//!
//! Each test works in a schema of its own ([`fresh_schema`]), so tests run in parallel against
//! one database and leave nothing that another test could see.

use tokio_postgres::{Client, NoTls};

/// The database's URL, `postgresql://user@127.0.0.1:port/postgres`.
///
/// # Panics
/// When `WEIR_POSTGRES_URL` is not set, saying how to run the test.
pub fn url() -> String {
    std::env::var("WEIR_POSTGRES_URL").expect(
        "WEIR_POSTGRES_URL is not set: run the PostgreSQL tests with scripts/test, which starts \
         a throwaway PostgreSQL cluster (or set it to postgresql://user@host:port/db yourself)",
    )
}

/// A schema made for one test.
#[derive(Debug, Clone)]
pub struct TestSchema {
    /// The schema's name (lower case letters, digits and `_`: no quoting needed).
    pub name: String,
    /// [`url`] with `options=-c search_path=<name>`: unqualified tables are the schema's.
    pub url: String,
}

impl TestSchema {
    /// A client whose unqualified tables are the schema's.
    ///
    /// # Panics
    /// When the database cannot be reached.
    pub async fn client(&self) -> Client {
        connect(&self.url).await
    }
}

/// A new, empty schema named `prefix` plus a suffix unique to the run.
///
/// # Panics
/// When the database cannot be reached or refuses.
pub async fn fresh_schema(prefix: &str) -> TestSchema {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(30)
        .collect();
    let name = format!(
        "t_{clean}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let client = connect(&url()).await;
    client
        .batch_execute(&format!("CREATE SCHEMA {name}"))
        .await
        .expect("create the test's schema");
    let base = url();
    let sep = if base.contains('?') { '&' } else { '?' };
    TestSchema {
        url: format!("{base}{sep}options=-c%20search_path%3D{name}"),
        name,
    }
}

/// A client connected to `url`, its connection driven by a task of the current runtime.
///
/// # Panics
/// When the database cannot be reached.
pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to PostgreSQL at WEIR_POSTGRES_URL: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}
