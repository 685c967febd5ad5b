//! Errors of the experiment crate.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// A problem in an experiment file: the file, the line and what to do.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ExpError {
    /// The experiment file.
    pub path: PathBuf,
    /// Line (1-based), when the problem has one.
    pub line: Option<usize>,
    /// What is wrong and what to do.
    pub message: String,
}

impl ExpError {
    /// Builds an error about `path` at `line`.
    pub fn new(path: &Path, line: Option<usize>, message: impl Into<String>) -> Self {
        Self {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    /// As a usage error (exit 2): the option is `FILE:LINE`.
    pub fn to_usage(&self) -> dmalab_core::UsageError {
        let opt = format!(
            "{}{}",
            self.path.display(),
            self.line.map(|l| format!(":{l}")).unwrap_or_default()
        );
        dmalab_core::UsageError::new(opt, self.message.clone())
    }
}

/// Errors while running an experiment or reading results.
#[derive(Debug, Error)]
pub enum RunError {
    /// Bad input (exit 2).
    #[error("{0}")]
    Usage(#[from] dmalab_core::UsageError),
    /// A results file cannot be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// The cause (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// Something else went wrong.
    #[error("{0}")]
    Other(String),
}

impl RunError {
    /// An I/O error about `path`.
    pub fn io(path: &Path, cause: std::io::Error) -> Self {
        RunError::Io {
            path: path.display().to_string(),
            cause,
        }
    }
}

impl From<ExpError> for RunError {
    fn from(e: ExpError) -> Self {
        RunError::Usage(e.to_usage())
    }
}

#[cfg(test)]
mod tests {
    use super::{ExpError, RunError};
    use dmalab_core::error::chain_line;
    use dmalab_core::UsageError;

    #[test]
    fn a_run_error_chain_prints_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = RunError::io("r.jsonl".as_ref(), io);
        assert_eq!(chain_line(&e), "r.jsonl: gone");
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn a_usage_run_error_returns_the_usage_error_as_its_source() {
        let e = RunError::from(ExpError::new("e.toml".as_ref(), Some(3), "bad"));
        assert_eq!(e.to_string(), "e.toml:3: bad");
        let u = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<UsageError>());
        assert_eq!(u, Some(&UsageError::new("e.toml:3", "bad")));
    }
}
