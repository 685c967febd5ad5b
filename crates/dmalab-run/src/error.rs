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
    #[error(transparent)]
    Usage(#[from] dmalab_core::UsageError),
    /// A results file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Something else went wrong.
    #[error("{0}")]
    Other(String),
}

impl RunError {
    /// An I/O error about `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        RunError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

impl From<ExpError> for RunError {
    fn from(e: ExpError) -> Self {
        RunError::Usage(e.to_usage())
    }
}
