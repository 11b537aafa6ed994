//! Who may act on a job through its server: the action token, the host names it answers, and
//! how often savepoints may be taken.
//!
//! Reading (the UI, `/metrics`, the JSON API's GETs) needs no credentials, as Prometheus
//! scrapes expect. Acting (`POST /api/v1/stop`, `POST /api/v1/savepoint`) needs the job's token
//! in `Authorization: Bearer TOKEN`: without it any local user, whatever their Unix account,
//! could stop a job or fill its disk with savepoints, and a page served from a domain pointed
//! at the job's address (DNS rebinding) could do the same.

use std::time::Duration;

/// The shortest time between two savepoints that let the job go on, unless told otherwise:
/// a savepoint is a full copy of the state, and a client asking in a loop would fill the disk.
pub const DEFAULT_SAVEPOINT_INTERVAL: Duration = Duration::from_secs(10);

/// Access rules of one server.
#[derive(Clone)]
pub struct Access {
    token: String,
    /// Where the user finds the token, for the answer to a request without it ("in FILE").
    token_hint: String,
    allowed_hosts: Vec<String>,
    savepoint_interval: Duration,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself: debug output ends up in logs.
        f.debug_struct("Access")
            .field("token_hint", &self.token_hint)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("savepoint_interval", &self.savepoint_interval)
            .finish_non_exhaustive()
    }
}

impl Access {
    /// Actions need `token`; only loopback host names are answered on a loopback address.
    ///
    /// # Errors
    /// `Config` if the token is shorter than 16 characters or holds characters other than
    /// printable ASCII without spaces (it travels in a header).
    pub fn new(token: impl Into<String>) -> crate::Result<Self> {
        let token = token.into();
        if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(crate::Error::Config {
                name: "--http-token".into(),
                value: "(not shown)".into(),
                hint: "a token of at least 16 printable ASCII characters without spaces; leave \
                       it out to have one generated"
                    .into(),
            });
        }
        Ok(Access {
            token,
            token_hint: "the token given to the job".into(),
            allowed_hosts: Vec::new(),
            savepoint_interval: DEFAULT_SAVEPOINT_INTERVAL,
        })
    }

    /// A new random token: 32 bytes from the operating system, as 64 hex digits.
    ///
    /// # Errors
    /// `Internal` if the operating system gives no random bytes.
    pub fn generate() -> crate::Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| crate::Error::Internal(format!("no random bytes for the token: {e}")))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Access::new(hex)
    }

    /// Says where the token is ("in /run/user/1000/weir/http-8081.token"), in the answer to an
    /// action without it.
    pub fn with_token_hint(mut self, hint: impl Into<String>) -> Self {
        self.token_hint = hint.into();
        self
    }

    /// Also answers requests naming `host` (a name or address, with or without a port) in
    /// their `Host` header. On an address that is not loopback, giving any allowed host means
    /// only those (and loopback names) are answered.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// The shortest time between two savepoints that let the job go on (a savepoint that stops
    /// the job is never refused for coming too soon).
    pub fn with_savepoint_interval(mut self, interval: Duration) -> Self {
        self.savepoint_interval = interval;
        self
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn token_hint(&self) -> &str {
        &self.token_hint
    }

    pub(crate) fn savepoint_interval(&self) -> Duration {
        self.savepoint_interval
    }

    pub(crate) fn has_allowed_hosts(&self) -> bool {
        !self.allowed_hosts.is_empty()
    }

    /// Whether `host` (a `Host` header) is one of the allowed hosts: the name compared without
    /// case, and the port too where the allowed entry gives one.
    pub(crate) fn allows_host(&self, host: &str) -> bool {
        let (name, port) = split_host(host);
        self.allowed_hosts.iter().any(|allowed| {
            let (a_name, a_port) = split_host(allowed);
            a_name.eq_ignore_ascii_case(name) && (a_port.is_none() || a_port == port)
        })
    }

    /// Whether an `Authorization` header carries the token (compared in constant time).
    pub(crate) fn authorises(&self, authorization: Option<&str>) -> bool {
        let Some(given) = authorization.and_then(|a| {
            let (scheme, rest) = a.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        }) else {
            return false;
        };
        let (a, b) = (given.as_bytes(), self.token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
    }
}

/// A `Host` header's name and port: `example.com:8081`, `[::1]:80`, `10.0.0.1`.
pub(crate) fn split_host(host: &str) -> (&str, Option<&str>) {
    if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (name, after.strip_prefix(':'));
    }
    match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_checked_whole_and_only_as_a_bearer_token() {
        let a = Access::new("0123456789abcdef0123").unwrap();
        assert!(a.authorises(Some("Bearer 0123456789abcdef0123")));
        assert!(a.authorises(Some("bearer  0123456789abcdef0123 ")));
        for wrong in [
            None,
            Some(""),
            Some("0123456789abcdef0123"),
            Some("Basic 0123456789abcdef0123"),
            Some("Bearer 0123456789abcdef012"),
            Some("Bearer 0123456789abcdef01234"),
            Some("Bearer 0123456789abcdef0124"),
        ] {
            assert!(!a.authorises(wrong), "{wrong:?}");
        }
        assert!(Access::new("short").is_err());
        assert!(Access::new("0123456789 abcdef0123").is_err());
        let g = Access::generate().unwrap();
        assert_eq!(g.token().len(), 64);
        assert_ne!(g.token(), Access::generate().unwrap().token());
        assert!(!format!("{g:?}").contains(g.token()));
    }

    #[test]
    fn allowed_hosts_match_by_name_and_by_port_where_given() {
        let a = Access::new("0123456789abcdef0123")
            .unwrap()
            .allow_host("weir.example.com")
            .allow_host("10.0.0.5:8081")
            .allow_host("[fd00::1]");
        for host in [
            "weir.example.com",
            "WEIR.example.com:9000",
            "10.0.0.5:8081",
            "[fd00::1]:8081",
        ] {
            assert!(a.allows_host(host), "{host}");
        }
        for host in [
            "",
            "evil.example",
            "weir.example.com.evil.example",
            "10.0.0.5:8082",
            "10.0.0.5",
            "[fd00::2]",
        ] {
            assert!(!a.allows_host(host), "{host}");
        }
    }
}
