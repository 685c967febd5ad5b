//! Errors of the fleet crate.

use dmalab_core::UsageError;
use dmalab_run::RunError;
use std::path::Path;
use thiserror::Error;

/// What can go wrong in `dmalab fleet`.
#[derive(Debug, Error)]
pub enum FleetError {
    /// Bad input (exit 2).
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A Slurm command failed; the message carries Slurm's own words.
    #[error("{0}")]
    Slurm(String),
    /// Something else went wrong.
    #[error("{0}")]
    Other(String),
}

impl FleetError {
    /// An I/O error about `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        FleetError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    /// A usage error (exit 2) about `option`.
    pub fn usage(option: impl Into<String>, message: impl Into<String>) -> Self {
        FleetError::Usage(UsageError::new(option, message))
    }
}

impl From<RunError> for FleetError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Usage(u) => FleetError::Usage(u),
            RunError::Io { path, source } => FleetError::Io { path, source },
            RunError::Other(s) => FleetError::Other(s),
        }
    }
}
