//! resctrl memory bandwidth monitoring (Documentation/arch/x86/resctrl.rst):
//! a monitoring group `mon_groups/dmalab-<pid>` holds the counted tasks;
//! `mon_data/mon_L3_XX/mbm_total_bytes` and `mbm_local_bytes` are read per
//! L3 domain and summed. The group is a step of the one ledger
//! ([`dmalab_core::ledger`]) before it is made, so a run killed with
//! `kill -9` leaves nothing that `dmalab cleanup` (or the next start) does
//! not remove.

use crate::spec::Absence;
use dmalab_core::ledger::{Changes, DirRemoval, LedgerDir, Step};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The ledger of one run's resctrl groups in the format before the one
/// ledger (`counters-<pid>.json`, still undone by the cleanup).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ledger {
    /// The dmalab process that made them.
    pub owner_pid: u32,
    /// Its start time (clock ticks since boot), so a recycled pid is not
    /// mistaken for the owner.
    pub owner_start: Option<u64>,
    /// Monitoring groups made.
    pub groups: Vec<PathBuf>,
}

/// A monitoring group, removed when dropped.
#[derive(Debug)]
pub struct MbmGroup {
    dir: PathBuf,
    changes: Changes,
}

/// Why this host cannot monitor memory bandwidth, if it cannot.
pub fn check(root: &Path) -> Result<(), Absence> {
    let features = fs::read_to_string(root.join("info/L3_MON/mon_features")).map_err(|_| {
        Absence::Missing {
            detail: format!(
                "resctrl memory bandwidth monitoring unavailable: {} is not a mounted resctrl with L3 monitoring (needs Intel RDT or AMD PQoS: mount -t resctrl resctrl /sys/fs/resctrl)",
                root.display()
            ),
        }
    })?;
    if !features.lines().any(|l| l.trim() == "mbm_total_bytes") {
        return Err(Absence::Missing {
            detail: format!(
                "this CPU monitors no memory bandwidth ({}/info/L3_MON/mon_features lists no mbm_total_bytes)",
                root.display()
            ),
        });
    }
    Ok(())
}

impl MbmGroup {
    /// Makes `mon_groups/dmalab-<pid>` under `root` for `tids`, after
    /// removing groups of dead runs recorded under `state_dir`.
    pub fn create(root: &Path, state_dir: &Path, tids: &[i32]) -> Result<Self, Absence> {
        check(root)?;
        let _ = cleanup_leftovers(state_dir);
        let dir = root
            .join("mon_groups")
            .join(format!("dmalab-{}", std::process::id()));
        let fail = |what: &str, e: io::Error| Absence::Missing {
            detail: format!("resctrl: cannot {what}: {e}"),
        };
        fs::create_dir_all(state_dir).map_err(|e| fail("create the ledger directory", e))?;
        let mut changes = Changes::new(LedgerDir::at(state_dir), "counters");
        let id = changes
            .record(Step::remove_dir(&dir, DirRemoval::Resctrl))
            .map_err(|e| fail("write the ledger", e))?;
        if let Err(e) = fs::create_dir(&dir) {
            let _ = changes.dir().forget(id);
            return Err(fail(&format!("make {}", dir.display()), e));
        }
        changes
            .created(id)
            .map_err(|e| fail("write the ledger", e))?;
        let g = Self { dir, changes };
        g.add_tasks(tids);
        Ok(g)
    }

    /// Moves tasks into the group (their later children follow them).
    pub fn add_tasks(&self, tids: &[i32]) {
        for t in tids {
            // One task per write, as resctrl requires.
            let _ = fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(self.dir.join("tasks"))
                .and_then(|mut f| io::Write::write_all(&mut f, format!("{t}\n").as_bytes()));
        }
    }

    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// (mbm_total_bytes, mbm_local_bytes) summed over the L3 domains; a
    /// domain reading `Unavailable` or `Error` adds nothing.
    pub fn read(&self) -> (u64, u64) {
        let mut total = 0u64;
        let mut local = 0u64;
        if let Ok(rd) = fs::read_dir(self.dir.join("mon_data")) {
            for d in rd.filter_map(Result::ok) {
                let v = |f: &str| {
                    fs::read_to_string(d.path().join(f))
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .unwrap_or(0)
                };
                total = total.saturating_add(v("mbm_total_bytes"));
                local = local.saturating_add(v("mbm_local_bytes"));
            }
        }
        (total, local)
    }
}

impl Drop for MbmGroup {
    fn drop(&mut self) {
        // On resctrl, rmdir removes a group with its files; a directory
        // tree that is not resctrl (a test's fake root) holds real files
        // that this run made (see `DirRemoval::Resctrl`).
        let r = self.changes.undo_all();
        for e in &r.errors {
            eprintln!("dmalab: warning: {e}; `dmalab cleanup` will retry");
        }
        for e in &r.left_alone {
            eprintln!("dmalab: warning: left alone: {e}");
        }
    }
}

/// What a cleanup did (the ledger's own outcome type).
pub use dmalab_core::ledger::Cleanup;

/// Undoes what every dead run recorded under `state_dir` (its resctrl
/// groups among the rest).
pub fn cleanup_leftovers(state_dir: &Path) -> Cleanup {
    LedgerDir::at(state_dir).cleanup_dead()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_root() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("info/L3_MON")).unwrap();
        fs::write(
            d.path().join("info/L3_MON/mon_features"),
            "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
        )
        .unwrap();
        fs::create_dir_all(d.path().join("mon_groups")).unwrap();
        d
    }

    #[test]
    fn absent_without_resctrl() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(check(d.path()), Err(Absence::Missing { .. })));
        fs::create_dir_all(d.path().join("info/L3_MON")).unwrap();
        fs::write(d.path().join("info/L3_MON/mon_features"), "llc_occupancy\n").unwrap();
        let e = check(d.path()).unwrap_err();
        assert!(e.to_string().contains("no mbm_total_bytes"), "{e}");
    }

    #[test]
    fn group_is_made_read_and_removed() {
        let root = fake_root();
        let state = tempfile::tempdir().unwrap();
        let g = MbmGroup::create(root.path(), state.path(), &[1234]).unwrap();
        let dir = g.dir().to_path_buf();
        assert_eq!(fs::read_to_string(dir.join("tasks")).unwrap(), "1234\n");
        for (dom, t, l) in [("mon_L3_00", 1000u64, 600u64), ("mon_L3_01", 24, 0)] {
            fs::create_dir_all(dir.join("mon_data").join(dom)).unwrap();
            fs::write(
                dir.join("mon_data").join(dom).join("mbm_total_bytes"),
                format!("{t}\n"),
            )
            .unwrap();
            fs::write(
                dir.join("mon_data").join(dom).join("mbm_local_bytes"),
                format!("{l}\n"),
            )
            .unwrap();
        }
        assert_eq!(g.read(), (1024, 600));
        assert!(state
            .path()
            .join(format!("proc-{}.json", std::process::id()))
            .exists());
        drop(g);
        assert!(!dir.exists());
        assert_eq!(fs::read_dir(state.path()).unwrap().count(), 0);
    }

    #[test]
    fn cleanup_removes_dead_owners_groups_only() {
        let root = fake_root();
        let state = tempfile::tempdir().unwrap();
        let dead_dir = root.path().join("mon_groups/dmalab-999999999");
        fs::create_dir_all(&dead_dir).unwrap();
        let dead = Ledger {
            owner_pid: u32::MAX - 1,
            owner_start: None,
            groups: vec![dead_dir.clone()],
        };
        fs::write(
            state.path().join("counters-1.json"),
            serde_json::to_string(&dead).unwrap(),
        )
        .unwrap();
        let live_dir = root.path().join("mon_groups/dmalab-live");
        fs::create_dir_all(&live_dir).unwrap();
        let live = Ledger {
            owner_pid: std::process::id(),
            owner_start: dmalab_core::ledger::process_start_time(std::process::id()),
            groups: vec![live_dir.clone()],
        };
        fs::write(
            state.path().join("counters-2.json"),
            serde_json::to_string(&live).unwrap(),
        )
        .unwrap();
        let r = cleanup_leftovers(state.path());
        assert!(!dead_dir.exists());
        assert!(live_dir.exists());
        assert_eq!(r.live, vec![std::process::id()]);
        assert!(!state.path().join("counters-1.json").exists());
    }
}
