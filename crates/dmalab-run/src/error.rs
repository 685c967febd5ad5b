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
    /// A child program (dmalab itself, to check a request) cannot be started.
    #[error("cannot run {program}: {cause}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// The run's temporary directory cannot be created.
    #[error("cannot create a temporary directory: {0}")]
    TempDir(std::io::Error),
    /// A line of a results file is not a results record.
    #[error("{path}:{line}: not a results record: {fault}")]
    ResultsRecord {
        /// The results file.
        path: String,
        /// The line (1-based).
        line: usize,
        /// What is wrong with it.
        fault: RecordFault,
    },
    /// A line of a results file is JSON without a `record` field.
    #[error("{path}:{line}: not a dmalab results record (no \"record\" field); is this an experiment results file?")]
    NotARecord {
        /// The results file.
        path: String,
        /// The line (1-based).
        line: usize,
    },
    /// A results file without its header line.
    #[error("{path}: no header line; this is not a `dmalab run` results file")]
    NoHeader {
        /// The results file.
        path: String,
    },
    /// A results file names a run past the end of the experiment's plan.
    #[error("{path}: run index {index} is outside the plan of {planned} runs")]
    RunOutsidePlan {
        /// The results file.
        path: String,
        /// The run's index in the file.
        index: usize,
        /// How many runs the plan has.
        planned: usize,
    },
    /// A results file's run differs from the plan's run at its index.
    #[error("{path}: run {index} does not match the plan; the results file was edited")]
    RunNotInPlan {
        /// The results file.
        path: String,
        /// The run's index in the file.
        index: usize,
    },
}

/// Why a line of a results file is not a record.
#[derive(Debug, Error)]
pub enum RecordFault {
    /// The line is not UTF-8.
    #[error("byte {byte} of the line is not valid UTF-8")]
    Utf8 {
        /// The first bad byte (1-based).
        byte: usize,
    },
    /// The line is not the JSON of a record (serde's words).
    #[error("{0}")]
    Json(serde_json::Error),
}

impl RunError {
    /// True when a file read as results is not a results file (a bad line,
    /// no record field, no header): bad input to whoever named the file.
    pub fn is_not_results(&self) -> bool {
        matches!(
            self,
            RunError::ResultsRecord { .. }
                | RunError::NotARecord { .. }
                | RunError::NoHeader { .. }
        )
    }

    /// `program` cannot be started.
    pub fn spawn(program: &Path, cause: std::io::Error) -> Self {
        RunError::Spawn {
            program: program.display().to_string(),
            cause,
        }
    }

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

    /// The typed variants print what the catch-all strings printed, byte
    /// for byte (users and `fleet status` read them), and carry no
    /// `source()`: the cause is in the message once.
    #[test]
    fn typed_run_errors_print_the_old_messages() {
        use super::RecordFault;
        let p: &std::path::Path = "r.jsonl".as_ref();
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let cases = [
            (RunError::spawn("/bin/dmalab".as_ref(), io()), "cannot run /bin/dmalab: gone"),
            (RunError::TempDir(io()), "cannot create a temporary directory: gone"),
            (
                RunError::ResultsRecord {
                    path: p.display().to_string(),
                    line: 3,
                    fault: RecordFault::Utf8 { byte: 7 },
                },
                "r.jsonl:3: not a results record: byte 7 of the line is not valid UTF-8",
            ),
            (
                RunError::NotARecord {
                    path: "r.jsonl".into(),
                    line: 2,
                },
                "r.jsonl:2: not a dmalab results record (no \"record\" field); is this an experiment results file?",
            ),
            (
                RunError::NoHeader {
                    path: "r.jsonl".into(),
                },
                "r.jsonl: no header line; this is not a `dmalab run` results file",
            ),
            (
                RunError::RunOutsidePlan {
                    path: "r.jsonl".into(),
                    index: 9,
                    planned: 4,
                },
                "r.jsonl: run index 9 is outside the plan of 4 runs",
            ),
            (
                RunError::RunNotInPlan {
                    path: "r.jsonl".into(),
                    index: 1,
                },
                "r.jsonl: run 1 does not match the plan; the results file was edited",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(chain_line(&e), want);
            assert!(std::error::Error::source(&e).is_none(), "{want}");
        }
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let want = format!("r.jsonl:1: not a results record: {json}");
        let e = RunError::ResultsRecord {
            path: "r.jsonl".into(),
            line: 1,
            fault: RecordFault::Json(json),
        };
        assert_eq!(chain_line(&e), want);
        assert!(e.is_not_results());
        assert!(!RunError::TempDir(io()).is_not_results());
    }

    #[test]
    fn a_usage_run_error_returns_the_usage_error_as_its_source() {
        let e = RunError::from(ExpError::new("e.toml".as_ref(), Some(3), "bad"));
        assert_eq!(e.to_string(), "e.toml:3: bad");
        let u = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<UsageError>());
        assert_eq!(u, Some(&UsageError::new("e.toml:3", "bad")));
    }
}
