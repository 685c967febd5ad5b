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
    /// A Slurm client command is not on PATH.
    #[error("{tool} is not on PATH: dmalab fleet drives Slurm through its client commands (sbatch, scontrol, squeue, sinfo, scancel; sacct where accounting is on); install them (Debian/Ubuntu: apt-get install slurm-client) or add their directory to PATH")]
    MissingTool {
        /// The command.
        tool: String,
    },
    /// The merged results cannot be serialized.
    #[error("{0}")]
    Serialize(serde_json::Error),
    /// Reading or checking a results file failed (not bad input).
    #[error(transparent)]
    Run(RunError),
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
            e => FleetError::Run(e),
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

    /// A run error that is not bad input stays exit 1 under fleet and
    /// prints as it did (`fleet status` shows it as `to_string()`).
    #[test]
    fn a_run_error_under_fleet_prints_as_it_did_and_is_not_usage() {
        let e = FleetError::from(dmalab_run::RunError::NoHeader {
            path: "n.jsonl".into(),
        });
        assert_eq!(
            chain_line(&e),
            "n.jsonl: no header line; this is not a `dmalab run` results file"
        );
        assert_eq!(e.to_string(), chain_line(&e));
        let mut s = std::error::Error::source(&e);
        while let Some(c) = s {
            assert!(c.downcast_ref::<UsageError>().is_none());
            s = c.source();
        }
        let e = FleetError::MissingTool {
            tool: "sbatch".into(),
        };
        assert!(chain_line(&e).starts_with("sbatch is not on PATH: dmalab fleet drives Slurm"));
    }
}
