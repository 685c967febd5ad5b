//! The host changes of `dmalab page` as steps of the one ledger
//! ([`dmalab_core::ledger`]): every cgroup, swap device, swap file and
//! sysctl a run changes is recorded *before* the change is made. The run
//! undoes it all on exit, error or signal; after `kill -9` the next start
//! or `dmalab cleanup` undoes what the dead owner left.

use dmalab_core::ledger::{Changes, LedgerDir, Step, StepId};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Directory of root's ledgers.
pub const STATE_DIR: &str = dmalab_core::ledger::STATE_DIR;

/// A sysctl (or other single-value file) changed for the run, as the
/// result reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SettingChange {
    /// The file, e.g. /proc/sys/vm/page-cluster.
    pub path: PathBuf,
    /// Its value before the run, restored afterwards.
    pub old: String,
    /// The value the run set.
    pub new: String,
}

/// The run's changes. Dropping it undoes every change.
pub struct Ledger {
    changes: Changes,
    settings: Vec<SettingChange>,
}

impl Ledger {
    /// Starts recording under `dir` (normally [`STATE_DIR`]).
    pub fn create(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        Ok(Self {
            changes: Changes::new(LedgerDir::at(dir), "page"),
            settings: Vec::new(),
        })
    }

    /// Records an undo step (call *before* making the change).
    pub fn record(&mut self, step: Step) -> io::Result<StepId> {
        self.changes.record(step)
    }

    /// Notes what a created file or directory is, once it exists.
    pub fn created(&self, id: StepId) -> io::Result<()> {
        self.changes.created(id)
    }

    /// Adds a setting to the result's list (one that needs no undo of its
    /// own, such as a v1 cgroup's swappiness, gone with the cgroup).
    pub fn report_setting(&mut self, s: SettingChange) {
        self.settings.push(s);
    }

    /// The settings changed so far.
    pub fn settings(&self) -> &[SettingChange] {
        &self.settings
    }

    /// Undoes every change, newest first, and returns what went wrong
    /// (empty when all was undone).
    pub fn undo(&mut self) -> Vec<String> {
        let r = self.changes.undo_all();
        r.errors
            .into_iter()
            .chain(r.left_alone.into_iter().map(|a| format!("left alone: {a}")))
            .collect()
    }
}

/// Writes `value` to a setting file, recording the old value first.
pub fn change_setting(ledger: &mut Ledger, path: &Path, value: &str) -> io::Result<()> {
    let step = Step::restore_setting(path, Some(value))?;
    if let Step::RestoreSetting { old, .. } = &step {
        ledger.report_setting(SettingChange {
            path: path.to_path_buf(),
            old: old.clone(),
            new: value.to_string(),
        });
    }
    ledger.record(step)?;
    fs::write(path, value)
}

/// What a cleanup found and did.
pub type CleanupReport = dmalab_core::ledger::Cleanup;

/// Undoes the changes of every dead run recorded under `dir`.
pub fn cleanup_leftovers(dir: &Path) -> CleanupReport {
    LedgerDir::at(dir).cleanup_dead()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_core::ledger::{Entry, LedgerFile, FORMAT};

    #[test]
    fn ledger_restores_settings_and_vanishes() {
        let dir = tempfile::tempdir().unwrap();
        let setting = dir.path().join("knob");
        fs::write(&setting, "3\n").unwrap();
        {
            let mut l = Ledger::create(dir.path()).unwrap();
            change_setting(&mut l, &setting, "0").unwrap();
            assert_eq!(fs::read_to_string(&setting).unwrap(), "0");
            let saved: LedgerFile = serde_json::from_str(
                &fs::read_to_string(dir.path().join(format!("proc-{}.json", std::process::id())))
                    .unwrap(),
            )
            .unwrap();
            let Step::RestoreSetting { old, .. } = &saved.steps[0].step else {
                panic!("{saved:?}");
            };
            assert_eq!(old, "3");
        }
        assert_eq!(fs::read_to_string(&setting).unwrap(), "3");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "ledger left behind"
        );
    }

    #[test]
    fn cleanup_undoes_dead_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let setting = dir.path().join("knob");
        fs::write(&setting, "3").unwrap();
        let step = Step::restore_setting(&setting, Some("0")).unwrap();
        fs::write(&setting, "0").unwrap();
        let ledger = |pid: u32, start: Option<u64>, steps: Vec<Step>| LedgerFile {
            format: FORMAT,
            owner_pid: pid,
            owner_start: start,
            steps: steps
                .into_iter()
                .map(|step| Entry {
                    id: 1,
                    by: "page".into(),
                    step,
                })
                .collect(),
        };
        let write = |name: &str, l: &LedgerFile| {
            let p = dir.path().join(name);
            fs::write(&p, serde_json::to_string(l).unwrap()).unwrap();
            fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        };
        write(
            "proc-1.json",
            &ledger(u32::MAX - 1, None, vec![step.clone()]),
        );
        let me = std::process::id();
        // A live run other than this test process: pid 1.
        let init = dmalab_core::ledger::process_start_time(1);
        write("proc-2.json", &ledger(1, init, vec![step]));
        let r = cleanup_leftovers(dir.path());
        assert_eq!(fs::read_to_string(&setting).unwrap(), "3");
        assert_eq!(r.live, vec![1]);
        assert!(!dir.path().join("proc-1.json").exists());
        assert!(dir.path().join("proc-2.json").exists());
        assert!(dmalab_core::ledger::owner_alive(
            me,
            dmalab_core::ledger::process_start_time(me)
        ));
    }
}
