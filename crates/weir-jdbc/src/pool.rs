//! A small pool of PostgreSQL connections for lookups.
//!
//! At most `size` connections exist, and each runs one query at a time, so the pool never
//! has more than `size` queries running on the server. A caller first takes a permit (waiting
//! while `size` are out), then an idle connection, or opens one (connections open lazily, on
//! demand). A connection goes back when its query is done; one that failed with a connection
//! error is dropped, and a later caller opens a new one.
//!
//! A lease dropped while its query runs (the caller's timeout) cancels the query on the
//! server and keeps its permit until the server has answered, so a timed-out query does not
//! leave more than `size` queries running either.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::{Client, NoTls, Statement};

use crate::plan::DbError;
use crate::postgres::{pg_connect, pg_err};

/// A connection with the statements it prepared.
pub(crate) struct PooledClient {
    pub client: Client,
    statements: HashMap<String, Statement>,
}

impl PooledClient {
    /// `sql` prepared once per connection.
    pub async fn prepare(&mut self, sql: &str) -> Result<Statement, DbError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).await.map_err(pg_err)?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

pub(crate) struct PgPool {
    config: tokio_postgres::Config,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<PooledClient>>,
    /// Connections opened so far, for tests and logs.
    opened: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for PgPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgPool")
            .field("available", &self.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl PgPool {
    pub fn new(config: tokio_postgres::Config, size: usize) -> Arc<Self> {
        Arc::new(PgPool {
            config,
            permits: Arc::new(Semaphore::new(size.max(1))),
            idle: Mutex::new(Vec::new()),
            opened: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    pub fn opened(&self) -> usize {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A connection to run one query on: an idle one (`reused`), or a new one.
    pub async fn lease(self: &Arc<Self>) -> Result<Lease, DbError> {
        let permit = (self.permits.clone().acquire_owned().await)
            .map_err(|_| DbError::fatal("the connection pool is closed"))?;
        loop {
            let idle = self.idle.lock().expect("pool lock").pop();
            match idle {
                Some(c) if c.client.is_closed() => continue,
                Some(c) => {
                    return Ok(Lease {
                        pool: self.clone(),
                        client: Some(c),
                        permit: Some(permit),
                        reused: true,
                    })
                }
                None => break,
            }
        }
        let client = self.open().await?;
        Ok(Lease {
            pool: self.clone(),
            client: Some(client),
            permit: Some(permit),
            reused: false,
        })
    }

    async fn open(&self) -> Result<PooledClient, DbError> {
        let client = pg_connect(&self.config).await?;
        self.opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(PooledClient {
            client,
            statements: HashMap::new(),
        })
    }
}

/// One connection and the permit to use it, until [`Lease::done`] (or drop).
pub(crate) struct Lease {
    pool: Arc<PgPool>,
    client: Option<PooledClient>,
    permit: Option<OwnedSemaphorePermit>,
    /// The connection was idle in the pool (it may have been closed since).
    pub reused: bool,
}

impl Lease {
    pub fn client(&mut self) -> &mut PooledClient {
        self.client
            .as_mut()
            .expect("a lease holds its connection until done")
    }

    /// Gives the connection back (dropped instead when `error` says it is broken).
    pub fn done(mut self, error: Option<&DbError>) {
        if let Some(c) = self.client.take() {
            let broken = c.client.is_closed() || error.is_some_and(|e| e.retryable);
            if !broken {
                self.pool.idle.lock().expect("pool lock").push(c);
            }
        }
        self.permit.take();
    }
}

impl Drop for Lease {
    /// Dropped while its query may be running: cancels it, waits for the server to answer,
    /// then gives the connection and the permit back.
    fn drop(&mut self) {
        let (Some(c), Some(permit)) = (self.client.take(), self.permit.take()) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.pool.clone();
        rt.spawn(async move {
            let token = c.client.cancel_token();
            let _ = token.cancel_query(NoTls).await;
            // Requests are answered in order: this one is answered after the cancelled query.
            if c.client.simple_query("").await.is_ok() {
                pool.idle.lock().expect("pool lock").push(c);
            }
            drop(permit);
        });
    }
}
