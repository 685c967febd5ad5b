//! The QEMU test guest (`scripts/nvme-vm/run.sh`): one boot runs a job
//! script with the dmalab binary under test, and leaves what the job wrote
//! under `DIR/results/` (a case `NAME` as `NAME/rc`, `NAME/stdout`,
//! `NAME/stderr`).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What one guest boot left behind.
pub struct Guest {
    /// The boot's folder (`console.log`, `trace.log`, `results/`).
    pub dir: PathBuf,
}

impl Guest {
    /// Boots the guest with `scripts/nvme-vm/JOB` into
    /// `CARGO_TARGET_TMPDIR/NAME`, passing `extra` to run.sh, and panics
    /// (pointing at the console log) when the guest fails. `what` names
    /// the guest in that message.
    pub fn boot(name: &str, job: &str, extra: &[&str], what: &str) -> Guest {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
        let status = Command::new(repo().join("scripts/nvme-vm/run.sh"))
            .arg("--out")
            .arg(&dir)
            .arg("--job")
            .arg(repo().join("scripts/nvme-vm").join(job))
            .arg("--dmalab")
            .arg(super::dmalab_bin())
            .args(extra)
            .status()
            .expect("run scripts/nvme-vm/run.sh");
        assert!(
            status.success(),
            "the {what} guest failed ({status}); see {}/console.log",
            dir.display()
        );
        Guest { dir }
    }

    /// A file the job wrote under `results/` (panics when it is missing).
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.join("results").join(rel))
            .unwrap_or_else(|e| panic!("guest result {rel}: {e}"))
    }

    /// A JSON file the job wrote under `results/`.
    pub fn json(&self, rel: &str) -> Value {
        serde_json::from_str(&self.read(rel))
            .unwrap_or_else(|e| panic!("guest result {rel} is not JSON ({e}):\n{}", self.read(rel)))
    }

    /// A case's exit code (-1 when unreadable), stdout and stderr.
    pub fn case(&self, name: &str) -> (i32, String, String) {
        let rc = self
            .read(&format!("{name}/rc"))
            .trim()
            .parse()
            .unwrap_or(-1);
        (
            rc,
            self.read(&format!("{name}/stdout")),
            self.read(&format!("{name}/stderr")),
        )
    }
}
