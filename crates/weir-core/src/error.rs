//! The error type of the core crate.

/// Errors raised by weir's core types.
///
/// Variants are grouped by who must act: the user (`Config`, `Plan`, `Schema`), or us
/// (`Internal`: a bug).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting has a value weir cannot use.
    #[error("invalid setting `{name}` = {value:?}: {hint}")]
    Config {
        name: String,
        value: String,
        hint: String,
    },
    /// A column or type does not fit what the job asks of it.
    #[error("schema error: {message}")]
    Schema { message: String },
    /// The job's shape cannot be run as written.
    #[error("plan error: {message}")]
    Plan { message: String },
    /// An Arrow kernel failed.
    #[error(transparent)]
    Arrow(#[from] arrow_schema::ArrowError),
    /// A broken invariant inside weir: this is a bug, please report it.
    #[error("internal error (this is a bug in weir): {0}")]
    Internal(String),
}

impl Error {
    pub fn schema(message: impl Into<String>) -> Self {
        Error::Schema {
            message: message.into(),
        }
    }
    pub fn plan(message: impl Into<String>) -> Self {
        Error::Plan {
            message: message.into(),
        }
    }
    pub fn config(name: impl Into<String>, value: impl ToString, hint: impl Into<String>) -> Self {
        Error::Config {
            name: name.into(),
            value: value.to_string(),
            hint: hint.into(),
        }
    }
}

/// `Result` with weir-core's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
