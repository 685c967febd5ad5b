//! Errors of the fleet crate.

use dmalab_core::UsageError;
use dmalab_run::RunError;
use std::path::Path;
use thiserror::Error;

/// What can go wrong in `dmalab fleet`.
#[derive(Debug, Error)]
pub enum FleetError {
    /// Bad input (exit 2).
    #[error("{0}")]
    Usage(#[from] UsageError),
    /// A file cannot be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// The cause (printed in the message, so not a `source()`).
        cause: std::io::Error,
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
    pub fn io(path: &Path, cause: std::io::Error) -> Self {
        FleetError::Io {
            path: path.display().to_string(),
            cause,
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
            RunError::Io { path, cause } => FleetError::Io { path, cause },
            RunError::Other(s) => FleetError::Other(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FleetError;
    use dmalab_core::error::chain_line;
    use dmalab_core::UsageError;

    #[test]
    fn a_fleet_error_chain_prints_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = FleetError::from(dmalab_run::RunError::io("m.json".as_ref(), io));
        assert_eq!(chain_line(&e), "m.json: gone");
        let e = FleetError::usage("--split", "bad");
        let u = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<UsageError>());
        assert_eq!(u, Some(&UsageError::new("--split", "bad")));
    }
}
