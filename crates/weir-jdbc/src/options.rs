//! The connection and sink options, under the names of Flink's JDBC connector. The lookup
//! options are described in [`crate::lookup`], the scan options in [`crate::source`]; the
//! lists below say which role reads which option.
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `url` | `jdbc:postgresql://host:port/db`, `postgresql://…`, `postgres://…`, `jdbc:sqlite:path`, `sqlite:path` | required |
//! | `table-name` | the target table; `schema.table` splits at the first dot (PostgreSQL) | required |
//! | `username` | the database user | the URL's, else the OS user |
//! | `password` | the user's password (never shown: Debug prints `***`, specs leave it out) | none |
//! | `password-env` | the environment variable holding the password | none |
//! | `sink.buffer-flush.max-rows` | rows buffered before a flush | 5000 |
//! | `sink.buffer-flush.interval` | longest time rows wait in the buffer (`1 s`, `500 ms`, `1s`) | 1 s |
//! | `sink.max-retries` | retries of a flush or commit after a transient connection error | 3 |
//!
//! A PostgreSQL URL may carry `user`, `password`, `currentSchema` (pgjdbc's: the schema
//! unqualified names resolve in), `options` (libpq's, such as `-c search_path=s`),
//! `application_name`, `connect_timeout` (seconds) and `sslmode=disable`/`prefer` as query
//! parameters; TLS is not supported. A password in the URL is taken out of it, as `password`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use weir_runtime::{Error, Result};

/// The options every role reads: where the table is and who connects.
pub const CONNECTION_OPTIONS: &[&str] =
    &["url", "table-name", "username", "password", "password-env"];

/// The options only the sink reads ([`crate::JdbcSinkFactory`]).
pub const SINK_OPTIONS: &[&str] = &[
    "sink.buffer-flush.max-rows",
    "sink.buffer-flush.interval",
    "sink.max-retries",
];

/// The options only a lookup reads ([`crate::LookupOptions`], [`crate::JdbcLookupTable`]).
pub const LOOKUP_OPTIONS: &[&str] = &[
    "lookup.cache",
    "lookup.partial-cache.max-rows",
    "lookup.partial-cache.expire-after-write",
    "lookup.partial-cache.cache-missing-key",
    "lookup.cache.max-rows",
    "lookup.cache.ttl",
    "lookup.cache.caching-missing-key",
    "lookup.max-retries",
    "lookup.max-concurrent-queries",
    "lookup.timeout",
];

/// The options only a scan reads ([`crate::ScanOptions`], [`crate::JdbcSource`]).
pub const SCAN_OPTIONS: &[&str] = &[
    "scan.partition.column",
    "scan.partition.num",
    "scan.partition.lower-bound",
    "scan.partition.upper-bound",
    "scan.fetch-size",
];

/// Every option of a `jdbc` table, whatever it is used as: a table is declared once and may
/// be a sink, a lookup table and a source, so each role accepts the others' options (and
/// reads only its own) but refuses any other.
pub const KNOWN_OPTIONS: &[&str] = &[
    "url",
    "table-name",
    "username",
    "password",
    "password-env",
    "sink.buffer-flush.max-rows",
    "sink.buffer-flush.interval",
    "sink.max-retries",
    "lookup.cache",
    "lookup.partial-cache.max-rows",
    "lookup.partial-cache.expire-after-write",
    "lookup.partial-cache.cache-missing-key",
    "lookup.cache.max-rows",
    "lookup.cache.ttl",
    "lookup.cache.caching-missing-key",
    "lookup.max-retries",
    "lookup.max-concurrent-queries",
    "lookup.timeout",
    "scan.partition.column",
    "scan.partition.num",
    "scan.partition.lower-bound",
    "scan.partition.upper-bound",
    "scan.fetch-size",
];

/// Refuses an option no role of a `jdbc` table reads (`connector = 'jdbc'` is allowed).
///
/// # Errors
/// A `Config` error naming the option and listing the known ones.
pub fn check_known(options: &BTreeMap<String, String>) -> Result<()> {
    for (k, v) in options {
        if k == "connector" && v == "jdbc" {
            continue;
        }
        if !KNOWN_OPTIONS.contains(&k.as_str()) {
            let shown = if k.contains("password") { "***" } else { v };
            return Err(Error::config(
                k,
                shown,
                format!(
                    "unknown option of a jdbc table; it reads: {}",
                    KNOWN_OPTIONS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// A secret: its `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(secret: impl Into<String>) -> Self {
        Password(secret.into())
    }
    /// The secret itself, for the database driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Which database the sink writes, parsed from `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    Postgres(PostgresUrl),
    /// A SQLite database file (created if missing).
    Sqlite {
        path: String,
    },
}

/// A PostgreSQL server and database, without the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    pub host: String,
    pub port: u16,
    pub dbname: String,
    /// The user named in the URL (`user@` or `?user=`).
    pub user: Option<String>,
    /// `currentSchema`: the schema unqualified names resolve in.
    pub current_schema: Option<String>,
    /// libpq's `options` (server settings such as `-c search_path=s`).
    pub options: Option<String>,
    pub application_name: Option<String>,
    pub connect_timeout: Option<Duration>,
}

impl fmt::Display for Database {
    /// Where the database is, for errors and logs: never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Postgres(p) => write!(f, "postgresql {}:{}/{}", p.host, p.port, p.dbname),
            Database::Sqlite { path } => write!(f, "sqlite {path}"),
        }
    }
}

impl Database {
    /// The URL again, without the password (for specs).
    pub fn redacted_url(&self) -> String {
        match self {
            Database::Sqlite { path } => format!("jdbc:sqlite:{path}"),
            Database::Postgres(p) => {
                let mut q = Vec::new();
                if let Some(u) = &p.user {
                    q.push(format!("user={}", encode(u)));
                }
                if let Some(s) = &p.current_schema {
                    q.push(format!("currentSchema={}", encode(s)));
                }
                if let Some(o) = &p.options {
                    q.push(format!("options={}", encode(o)));
                }
                if let Some(a) = &p.application_name {
                    q.push(format!("application_name={}", encode(a)));
                }
                if let Some(t) = p.connect_timeout {
                    q.push(format!("connect_timeout={}", t.as_secs()));
                }
                let q = if q.is_empty() {
                    String::new()
                } else {
                    format!("?{}", q.join("&"))
                };
                format!("jdbc:postgresql://{}:{}/{}{q}", p.host, p.port, p.dbname)
            }
        }
    }
}

/// A table name, possibly in a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: Option<String>,
    pub name: String,
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The parsed options of a JDBC sink.
#[derive(Debug, Clone, PartialEq)]
pub struct JdbcOptions {
    pub database: Database,
    pub table: TableName,
    /// `username`, else the URL's user.
    pub username: Option<String>,
    pub password: Option<Password>,
    /// `password-env`: kept so that a spec can name it instead of the password.
    pub password_env: Option<String>,
    pub max_rows: usize,
    pub flush_interval: Duration,
    pub max_retries: u32,
}

impl JdbcOptions {
    /// Reads Flink's JDBC options (see the [module docs](self)); `connector = 'jdbc'` is
    /// allowed and ignored, and so are the lookup and scan options (other roles read them).
    ///
    /// # Errors
    /// A `Config` error naming the option, its value and what to write instead, for an unknown
    /// option, a missing `url` or `table-name`, a malformed value, or a `password-env` naming
    /// a variable that is not set.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Self> {
        check_known(options)?;
        let get = |k: &str| options.get(k).map(|v| v.trim().to_string());
        let url = get("url").ok_or_else(|| {
            Error::config(
                "url",
                "",
                "required: 'jdbc:postgresql://host:5432/db' or 'jdbc:sqlite:path/to/file.db'",
            )
        })?;
        let (database, url_password) = parse_url(&url)?;
        let table = get("table-name").filter(|t| !t.is_empty()).ok_or_else(|| {
            Error::config("table-name", "", "required: the table the sink writes")
        })?;
        let table = match (&database, table.split_once('.')) {
            (Database::Postgres(_), Some((s, t))) if !s.is_empty() && !t.is_empty() => TableName {
                schema: Some(s.to_string()),
                name: t.to_string(),
            },
            _ => TableName {
                schema: None,
                name: table,
            },
        };
        let password_env = get("password-env");
        let password = match (get("password"), &password_env) {
            (Some(_), Some(_)) => {
                return Err(Error::config(
                    "password-env",
                    password_env.unwrap_or_default(),
                    "give either `password` or `password-env`, not both",
                ))
            }
            (Some(p), None) => Some(Password(p)),
            (None, Some(var)) => Some(Password(std::env::var(var).map_err(|_| {
                Error::config(
                    "password-env",
                    var,
                    "no such environment variable is set: export it before starting the job",
                )
            })?)),
            (None, None) => url_password,
        };
        let username = get("username").or_else(|| match &database {
            Database::Postgres(p) => p.user.clone(),
            Database::Sqlite { .. } => None,
        });
        let max_rows = match get("sink.buffer-flush.max-rows") {
            None => 5000,
            Some(v) => v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                Error::config(
                    "sink.buffer-flush.max-rows",
                    &v,
                    "expected a positive number of rows, such as '5000'",
                )
            })?,
        };
        let flush_interval = match get("sink.buffer-flush.interval") {
            None => Duration::from_secs(1),
            Some(v) => parse_duration(&v).ok_or_else(|| {
                Error::config(
                    "sink.buffer-flush.interval",
                    &v,
                    "expected a duration such as '1 s', '500 ms' or '1s'",
                )
            })?,
        };
        let max_retries = match get("sink.max-retries") {
            None => 3,
            Some(v) => v.parse::<u32>().ok().filter(|n| *n <= 100).ok_or_else(|| {
                Error::config(
                    "sink.max-retries",
                    &v,
                    "expected a number of retries from 0 to 100, such as '3'",
                )
            })?,
        };
        Ok(JdbcOptions {
            database,
            table,
            username,
            password,
            password_env,
            max_rows,
            flush_interval,
            max_retries,
        })
    }

    /// The options again, without any password (a `password-env` is kept): what
    /// [`JdbcOptions::from_options`] reads back, less a password given in the clear.
    pub fn to_options(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("url".into(), self.database.redacted_url());
        m.insert("table-name".into(), self.table.to_string());
        if let Some(u) = &self.username {
            m.insert("username".into(), u.clone());
        }
        if let Some(e) = &self.password_env {
            m.insert("password-env".into(), e.clone());
        }
        m.insert(
            "sink.buffer-flush.max-rows".into(),
            self.max_rows.to_string(),
        );
        m.insert(
            "sink.buffer-flush.interval".into(),
            format!("{} ms", self.flush_interval.as_millis()),
        );
        m.insert("sink.max-retries".into(), self.max_retries.to_string());
        m
    }
}

/// A duration such as `1 s`, `500 ms`, `1s`, `2 min`; a bare number is milliseconds.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => n,
        "s" | "sec" | "secs" | "second" | "seconds" => n.checked_mul(1_000)?,
        "min" | "mins" | "minute" | "minutes" => n.checked_mul(60_000)?,
        "h" | "hour" | "hours" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

fn url_err(url: &str, hint: &str) -> Error {
    Error::config("url", redact_url_text(url), hint)
}

/// `url` with any `user:password@` password and `password=` parameter masked.
fn redact_url_text(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(start) = out.find("://") {
        let rest = &out[start + 3..];
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                out = format!(
                    "{}{}***{}",
                    &out[..start + 3],
                    &rest[..colon + 1],
                    &rest[at..]
                );
            }
        }
    }
    if let Some(i) = out.find("password=") {
        let tail = out[i..]
            .find('&')
            .map_or(String::new(), |j| out[i + j..].to_string());
        out = format!("{}password=***{tail}", &out[..i]);
    }
    out
}

const PG_HINT: &str = "expected 'jdbc:postgresql://host:port/database' (or postgresql://, \
     postgres://) or 'jdbc:sqlite:path/to/file.db'";

/// The database named by `url`, and a password it carried.
fn parse_url(url: &str) -> Result<(Database, Option<Password>)> {
    let u = url.strip_prefix("jdbc:").unwrap_or(url);
    if let Some(path) = u.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(url_err(url, "expected 'jdbc:sqlite:path/to/file.db'"));
        }
        return Ok((
            Database::Sqlite {
                path: path.to_string(),
            },
            None,
        ));
    }
    let rest = u
        .strip_prefix("postgresql://")
        .or_else(|| u.strip_prefix("postgres://"))
        .ok_or_else(|| url_err(url, PG_HINT))?;
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, dbname) = main.split_once('/').unwrap_or((main, ""));
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((ui, hp)) => (Some(ui), hp),
        None => (None, authority),
    };
    let mut user = None;
    let mut password = None;
    if let Some(ui) = userinfo {
        let (u, p) = ui.split_once(':').map_or((ui, None), |(u, p)| (u, Some(p)));
        user = Some(decode(u).ok_or_else(|| url_err(url, "the user name is badly escaped"))?);
        if let Some(p) = p {
            password =
                Some(Password(decode(p).ok_or_else(|| {
                    url_err(url, "the password is badly escaped")
                })?));
        }
    }
    let (host, port) = match hostport.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| url_err(url, "an IPv6 host needs its closing ']'"))?;
            (h.to_string(), after.strip_prefix(':').unwrap_or(""))
        }
        None => match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p),
            None => (hostport.to_string(), ""),
        },
    };
    let port = if port.is_empty() {
        5432
    } else {
        port.parse::<u16>()
            .map_err(|_| url_err(url, "the port is not a number from 1 to 65535"))?
    };
    let host = if host.is_empty() {
        "localhost".to_string()
    } else {
        host
    };
    let dbname =
        decode(dbname).ok_or_else(|| url_err(url, "the database name is badly escaped"))?;
    let dbname = if dbname.is_empty() {
        "postgres".to_string()
    } else {
        dbname
    };
    let mut pg = PostgresUrl {
        host,
        port,
        dbname,
        user,
        current_schema: None,
        options: None,
        application_name: None,
        connect_timeout: None,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = decode(v).ok_or_else(|| url_err(url, &format!("`{k}` is badly escaped")))?;
        match k {
            "user" => pg.user = Some(v),
            "password" => password = Some(Password(v)),
            "currentSchema" => pg.current_schema = Some(v),
            "options" => pg.options = Some(v),
            "application_name" | "ApplicationName" => pg.application_name = Some(v),
            "connect_timeout" | "connectTimeout" => {
                let secs = v.parse::<u64>().map_err(|_| {
                    url_err(url, "connect_timeout is a number of seconds, such as 10")
                })?;
                pg.connect_timeout = Some(Duration::from_secs(secs));
            }
            "sslmode" if v == "disable" || v == "prefer" || v == "allow" => {}
            "sslmode" => {
                return Err(url_err(
                    url,
                    "TLS is not supported by weir's PostgreSQL sink yet: use sslmode=disable \
                     (a local or tunnelled server)",
                ))
            }
            other => {
                return Err(url_err(
                    url,
                    &format!(
                        "unknown URL parameter `{other}`; the PostgreSQL URL reads user, \
                         password, currentSchema, options, application_name, connect_timeout \
                         and sslmode"
                    ),
                ))
            }
        }
    }
    Ok((Database::Postgres(pg), password))
}

/// Percent-decoding (`+` is kept as is).
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_postgres_url() {
        let o = JdbcOptions::from_options(&opts(&[
            (
                "url",
                "jdbc:postgresql://db.example:6543/shop?currentSchema=sales",
            ),
            ("table-name", "orders"),
            ("username", "weir"),
        ]))
        .unwrap();
        assert_eq!(o.max_rows, 5000);
        assert_eq!(o.flush_interval, Duration::from_secs(1));
        assert_eq!(o.max_retries, 3);
        let Database::Postgres(p) = &o.database else {
            panic!("postgres expected")
        };
        assert_eq!(
            (p.host.as_str(), p.port, p.dbname.as_str()),
            ("db.example", 6543, "shop")
        );
        assert_eq!(p.current_schema.as_deref(), Some("sales"));
        assert_eq!(o.database.to_string(), "postgresql db.example:6543/shop");
    }

    #[test]
    fn plain_and_sqlite_urls() {
        for url in ["postgresql://h/db", "postgres://h:5432/db"] {
            let (d, _) = parse_url(url).unwrap();
            assert!(matches!(d, Database::Postgres(p) if p.host == "h" && p.port == 5432));
        }
        for url in ["jdbc:sqlite:/tmp/x.db", "sqlite:/tmp/x.db"] {
            let (d, _) = parse_url(url).unwrap();
            assert_eq!(
                d,
                Database::Sqlite {
                    path: "/tmp/x.db".into()
                }
            );
        }
    }

    #[test]
    fn durations_in_flink_spellings() {
        assert_eq!(parse_duration("1 s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("500 ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2 min"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn unknown_option_is_named_with_the_known_ones() {
        let e = JdbcOptions::from_options(&opts(&[
            ("url", "sqlite:x.db"),
            ("table-name", "t"),
            ("sink.buffer-flush.max-row", "10"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("sink.buffer-flush.max-row"), "{e}");
        assert!(e.contains("sink.buffer-flush.max-rows"), "{e}");
    }

    #[test]
    fn bad_values_say_the_value_and_the_fix() {
        let e = JdbcOptions::from_options(&opts(&[
            ("url", "sqlite:x.db"),
            ("table-name", "t"),
            ("sink.buffer-flush.interval", "fast"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"fast\"") && e.contains("500 ms"), "{e}");
        let e = JdbcOptions::from_options(&opts(&[("url", "mysql://h/db"), ("table-name", "t")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mysql://h/db") && e.contains("jdbc:postgresql://"),
            "{e}"
        );
    }

    #[test]
    fn password_never_shows() {
        std::env::set_var("WEIR_JDBC_TEST_PW", "s3cret-env");
        let o = JdbcOptions::from_options(&opts(&[
            ("url", "postgresql://u:s3cret-url@h/db"),
            ("table-name", "t"),
        ]))
        .unwrap();
        assert_eq!(
            o.password.as_ref().map(Password::expose),
            Some("s3cret-url")
        );
        let shown = format!("{o:?} {:?} {}", o.to_options(), o.database.redacted_url());
        assert!(!shown.contains("s3cret"), "{shown}");
        let o = JdbcOptions::from_options(&opts(&[
            ("url", "postgresql://h/db"),
            ("table-name", "t"),
            ("password-env", "WEIR_JDBC_TEST_PW"),
        ]))
        .unwrap();
        assert_eq!(
            o.password.as_ref().map(Password::expose),
            Some("s3cret-env")
        );
        assert!(!format!("{o:?} {:?}", o.to_options()).contains("s3cret"));
        let e = parse_url("postgresql://u:s3cret@h:notaport/db")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret") && e.contains("port"), "{e}");
        let e = parse_url("postgresql://h/db?password=s3cret&sslmode=require")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret") && e.contains("TLS"), "{e}");
    }
}
