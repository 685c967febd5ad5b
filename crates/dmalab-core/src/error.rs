//! The error every command returns for bad input.
//!
//! The binary maps a [`UsageError`] anywhere in an error chain to exit code 2
//! and prints it as one line: `dmalab: error: --OPTION: MESSAGE`.

use thiserror::Error;

/// Bad input from the user: names the option (or experiment-file field), and
/// says what is wrong and what to do instead.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{option}: {message}")]
pub struct UsageError {
    /// The flag (`--bs`) or field (`aggressor.pattern`, line 3) at fault.
    pub option: String,
    /// What is wrong with the value and what to do about it.
    pub message: String,
}

impl UsageError {
    /// Builds a usage error for `option` with a message.
    pub fn new(option: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            option: option.into(),
            message: message.into(),
        }
    }
}
