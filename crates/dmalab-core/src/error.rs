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

/// An error and its causes on one line, `error: cause: cause`, as the
/// binary prints it. Each error prints its own part only: a message never
/// repeats a cause it also returns from `source()` (a `Usage(UsageError)`
/// variant prints its `UsageError`, which the binary finds and prints
/// alone), so every cause appears exactly once.
pub fn chain_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::{chain_line, UsageError};

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("{0}")]
        Usage(#[from] UsageError),
        #[error("reading {path}")]
        Read {
            path: String,
            #[source]
            inner: Inner,
        },
    }

    #[derive(Debug, thiserror::Error)]
    #[error("line 3: {cause}")]
    struct Inner {
        cause: std::io::Error,
    }

    #[test]
    fn a_chain_prints_each_cause_once() {
        let e = Outer::Read {
            path: "x.toml".into(),
            inner: Inner {
                cause: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
            },
        };
        assert_eq!(chain_line(&e), "reading x.toml: line 3: gone");
    }

    #[test]
    fn a_usage_variant_returns_its_usage_error_as_the_source() {
        let e = Outer::from(UsageError::new("--bs", "must be a power of two"));
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<UsageError>());
        assert_eq!(
            source,
            Some(&UsageError::new("--bs", "must be a power of two"))
        );
        assert_eq!(e.to_string(), "--bs: must be a power of two");
    }
}
