//! The error type of the HTTP server.

use std::net::SocketAddr;

/// Errors starting or running the server.
///
/// Grouped by who must act: the user (`Config`, `Bind`: another address, or `--http off`) or
/// us (`Internal`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting the server cannot use, such as an unreadable `--http` address.
    #[error("invalid setting `{name}` = {value:?}: {hint}")]
    Config {
        name: String,
        value: String,
        hint: String,
    },
    /// The address could not be listened on (taken by another program, not this machine's).
    #[error(
        "cannot serve HTTP on {addr}: {source}; choose another address with --http HOST:PORT \
         (port 0 picks a free one) or turn the server off with --http off"
    )]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// This is a bug.
    #[error("internal error in the HTTP server (this is a bug): {0}")]
    Internal(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
