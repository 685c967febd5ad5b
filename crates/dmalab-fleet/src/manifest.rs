//! `RESULTS/fleet.json`: the experiment a results directory belongs to,
//! its units, and every submission (job ID, which unit each array task
//! runs). Written atomically; `status` and `merge` read it back.

use crate::error::FleetError;
use crate::plan::{Split, Unit};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// File name of the manifest inside the results directory.
pub const MANIFEST: &str = "fleet.json";
/// File name of the experiment file's copy inside the results directory
/// (what every task runs, so every node reads the same bytes).
pub const EXPERIMENT: &str = "experiment.toml";
/// File name of the marker every task checks: the results directory is
/// shared when a node sees it with the token of the manifest.
pub const MARKER: &str = ".dmalab-fleet-marker";
/// Version of the manifest's layout.
pub const MANIFEST_VERSION: u32 = 1;

/// One `dmalab fleet submit` that reached Slurm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// 1-based; names the script (`fleet-N.sbatch`).
    pub number: u32,
    /// The array job's ID.
    pub job_id: String,
    /// When it was submitted, RFC 3339.
    pub submitted_at: String,
    /// The sbatch script, relative to the results directory.
    pub script: String,
    /// The unit key each array task runs, by array index.
    pub tasks: Vec<String>,
}

/// The manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Layout version.
    pub manifest_version: u32,
    /// Experiment name.
    pub experiment: String,
    /// SHA-256 of the experiment file, hex: every results file merged must
    /// carry it.
    pub experiment_hash: String,
    /// The experiment file as first given.
    pub experiment_source: String,
    /// How the experiment is cut into tasks.
    pub split: Split,
    /// Tasks per node.
    pub per_node: u32,
    /// The token in the marker file.
    pub marker_token: String,
    /// Every unit ever submitted, in order.
    pub units: Vec<Unit>,
    /// Submissions, oldest first.
    pub submissions: Vec<Submission>,
}

impl Manifest {
    /// Its path in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(MANIFEST)
    }

    /// Reads the manifest of `dir`; None when there is none.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, FleetError> {
        let p = Self::path(dir);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(FleetError::io(&p, e)),
        };
        // A damaged or foreign manifest is bad input (exit 2), not a fault.
        let m: Manifest = serde_json::from_str(&text).map_err(|e| {
            FleetError::usage(
                "RESULTS",
                format!(
                    "{}: not a dmalab fleet manifest ({e}); was it edited?",
                    p.display()
                ),
            )
        })?;
        if m.manifest_version != MANIFEST_VERSION {
            return Err(FleetError::usage(
                "RESULTS",
                format!(
                    "{}: manifest version {} (this dmalab reads {MANIFEST_VERSION})",
                    p.display(),
                    m.manifest_version
                ),
            ));
        }
        Ok(Some(m))
    }

    /// Writes it atomically into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), FleetError> {
        let p = Self::path(dir);
        dmalab_core::output::write_atomic(&p, dmalab_core::output::to_json(self).as_bytes())
            .map_err(|e| FleetError::io(&p, e))
    }

    /// The unit with this key.
    pub fn unit(&self, key: &str) -> Option<&Unit> {
        self.units.iter().find(|u| u.key == key)
    }

    /// The latest submission that ran this unit, and its array index there.
    pub fn last_task(&self, key: &str) -> Option<(&Submission, usize)> {
        self.submissions
            .iter()
            .rev()
            .find_map(|s| s.tasks.iter().position(|t| t == key).map(|i| (s, i)))
    }
}
