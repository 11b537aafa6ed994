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

/// A PostgreSQL cluster of a test's own, in a temporary folder on a free port of 127.0.0.1,
/// for tests that stop and start the server (`pg_ctl`). Run as the `postgres` user when the
/// test runs as root (initdb refuses root). Stopped and deleted when dropped.
pub struct Cluster {
    bin: std::path::PathBuf,
    dir: std::path::PathBuf,
    port: u16,
    as_root: bool,
}

impl Cluster {
    /// initdb and start a new cluster.
    ///
    /// # Panics
    /// When PostgreSQL's server programs are not installed (scripts/test installs them) or the
    /// cluster does not start.
    pub fn start() -> Cluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|e| Some(e.ok()?.path().join("bin")))
            .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
            .max()
            .expect("no PostgreSQL server programs in /usr/lib/postgresql/*/bin: run scripts/test, which installs them");
        let dir = std::env::temp_dir().join(format!(
            "weir-pg-{}-{}",
            std::process::id(),
            std::time::SystemTime::UNIX_EPOCH
                .elapsed()
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let as_root = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let mut c = Cluster {
            bin,
            dir,
            port: 0,
            as_root,
        };
        if as_root {
            let ok = std::process::Command::new("chown")
                .args(["postgres"])
                .arg(&c.dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "chown postgres {}: is there a postgres user?",
                c.dir.display()
            );
        }
        c.run(
            "initdb",
            &[
                "-D",
                &c.data(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
        );
        // On a port found free just before: another process may take it first (its own port
        // 0), so another port then, a few times. Any other failure is the failure.
        let server_log = c.dir.join("server.log");
        for _ in 0..5 {
            c.port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let logged = std::fs::metadata(&server_log).map_or(0, |m| m.len() as usize);
            let Err(e) = c.try_start_server() else {
                return c;
            };
            let text = std::fs::read_to_string(&server_log).unwrap_or_default();
            let this_try = text.get(logged..).unwrap_or_default();
            assert!(
                this_try.contains("could not bind"),
                "{e}\nthe server's log:\n{this_try}"
            );
        }
        panic!(
            "the cluster found its port taken five times; the server's log: {}",
            server_log.display()
        );
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// `program` of the server's, run as the postgres user when the test runs as root.
    fn command(&self, program: &str) -> std::process::Command {
        let path = self.bin.join(program);
        if self.as_root {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            std::process::Command::new(path)
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        if let Err(e) = self.try_run(program, args) {
            panic!("{e}");
        }
    }

    /// `program` with `args`; what it printed when it fails.
    fn try_run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let out = self
            .command(program)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// Starts the (stopped) server and waits until it takes connections.
    ///
    /// # Panics
    /// If it does not start.
    pub fn start_server(&self) {
        if let Err(e) = self.try_start_server() {
            panic!("{e}");
        }
    }

    fn try_start_server(&self) -> Result<(), String> {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        self.try_run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-t",
                "60",
                "-o",
                &opts,
                "start",
            ],
        )
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`): connections drop.
    pub fn stop_server(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "stop"]);
    }

    /// `postgresql://postgres@127.0.0.1:port/postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
