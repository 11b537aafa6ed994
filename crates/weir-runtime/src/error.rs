//! The error type of the runtime.

/// Errors raised while building or running a job.
///
/// Grouped by who must act: the user (`Config`, `Plan`, `Core` schema errors), an external
/// system (`External`), a failed operator (`Operator`, which names it), or us (`Internal`).
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
    /// The job's shape cannot be run as written.
    #[error("{0}")]
    Plan(String),
    /// Checkpoint storage (a folder that is not a checkpoint, a write that failed).
    #[error(transparent)]
    State(#[from] weir_state::Error),
    /// An error from weir-core (schemas, keys, expressions).
    #[error(transparent)]
    Core(#[from] weir_core::Error),
    /// An Arrow kernel failed.
    #[error(transparent)]
    Arrow(#[from] arrow_schema::ArrowError),
    /// Reading or writing a file or another system failed.
    #[error("{system}: {message}")]
    External {
        system: String,
        message: String,
        /// Whether trying again may pass (a lost connection, a full disk); when the system's
        /// answer is final (a constraint the rows break), the job fails without a restart.
        retryable: bool,
    },
    /// An output (a sink's file or folder of part files, the dead-letter file) that another
    /// running job writes.
    #[error(
        "{what} {} is written by {holder}: two jobs on one output overwrite and delete each \
         other's rows; stop that job, or give this one another path{hint}",
        path.display()
    )]
    OutputInUse {
        /// Which output: `output of sink `out``, `dead-letter file`.
        what: String,
        path: std::path::PathBuf,
        holder: String,
        /// How to give another path, or nothing.
        hint: String,
    },
    /// More of the input went to the dead letters than the job allows.
    #[error(
        "{dead_letters} of {records} records read ({:.1} %) are dead letters, more than the \
         {:.1} % the job allows (max_dead_letter_share, SET 'weir.max-dead-letter-share' in SQL, \
         --max-dead-letter-share on the command line): the input is probably not what the job \
         expects (a delimiter, a format, a column type); the dead letters say why each record \
         was refused",
        100.0 * *dead_letters as f64 / (*records).max(1) as f64,
        100.0 * max_share
    )]
    TooManyDeadLetters {
        dead_letters: u64,
        records: u64,
        max_share: f64,
    },
    /// A bad input record with the `fail` policy.
    #[error("bad record at {position}: {reason}")]
    BadRecord { position: String, reason: String },
    /// An operator, source or sink failed; the job was stopped.
    #[error("operator `{operator}` (subtask {subtask} of {parallelism}, created at {created_at}) failed: {source}")]
    Operator {
        operator: String,
        subtask: usize,
        parallelism: usize,
        created_at: String,
        #[source]
        source: Box<Error>,
    },
    /// This subtask stopped because another one failed (the job reports that one).
    #[error("stopped because another subtask of the job failed")]
    Cancelled,
    /// A broken invariant inside weir: this is a bug, please report it.
    #[error("internal error (this is a bug in weir): {0}")]
    Internal(String),
}

impl Error {
    /// Whether the failure may pass when the job starts again (from a checkpoint): not a
    /// refused plan, a bad setting, a bad record with the `fail` policy, too many dead
    /// letters, a corrupt checkpoint or a checkpoint folder in use, which would happen again.
    pub fn may_pass_on_restart(&self) -> bool {
        match self {
            Error::Operator { source, .. } => source.may_pass_on_restart(),
            Error::Plan(_)
            | Error::Config { .. }
            | Error::BadRecord { .. }
            | Error::TooManyDeadLetters { .. }
            | Error::OutputInUse { .. } => false,
            // A checkpoint that is corrupt, of a newer format or not one, and a folder another
            // job holds, are what they are on every try: restarting only delays the failure.
            Error::State(
                weir_state::Error::CorruptCheckpoint { .. }
                | weir_state::Error::UnsupportedFormat { .. }
                | weir_state::Error::NotACheckpoint { .. }
                | weir_state::Error::InUse { .. },
            ) => false,
            // An outside system's answer that trying again cannot change (a constraint the
            // rows break, a table whose columns do not fit): the system says so.
            Error::External {
                retryable: false, ..
            } => false,
            _ => true,
        }
    }

    pub fn plan(message: impl Into<String>) -> Self {
        Error::Plan(message.into())
    }
    pub fn config(name: impl Into<String>, value: impl ToString, hint: impl Into<String>) -> Self {
        Error::Config {
            name: name.into(),
            value: value.to_string(),
            hint: hint.into(),
        }
    }
    /// A failure of file or network I/O: the outside world, which may be different on the
    /// next try (a full disk, a folder in the way), so retryable.
    pub fn io(system: impl Into<String>, err: impl std::fmt::Display) -> Self {
        Error::External {
            system: system.into(),
            message: err.to_string(),
            retryable: true,
        }
    }
}

/// `Result` with the runtime's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_checkpoint_or_a_folder_in_use_fails_at_once() {
        let corrupt = Error::State(weir_state::Error::CorruptCheckpoint {
            path: "chk-3/_manifest.json".into(),
            message: "not a manifest".into(),
        });
        let in_use = Error::State(weir_state::Error::InUse {
            path: "checkpoints".into(),
            holder: "job `a`".into(),
        });
        for e in [corrupt, in_use] {
            assert!(!e.may_pass_on_restart(), "{e}");
            let wrapped = Error::Operator {
                operator: "join".into(),
                subtask: 0,
                parallelism: 1,
                created_at: "here".into(),
                source: Box::new(e),
            };
            assert!(!wrapped.may_pass_on_restart());
        }
        let io = Error::State(weir_state::Error::io(
            "write",
            "chk-3/state.arrow",
            std::io::Error::other("disk full"),
        ));
        assert!(io.may_pass_on_restart());
    }
}
