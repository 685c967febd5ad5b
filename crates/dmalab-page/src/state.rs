//! The ledger of host changes: every cgroup, swap device, swap file and
//! sysctl a run changes is written to `/run/dmalab/page-<pid>.json` *before*
//! the change is made, with the old value. The run undoes it all on exit,
//! error or signal; if the run was killed (`kill -9`), the next start or
//! `dmalab cleanup` finds the file of a dead owner and undoes it then.

use crate::cgroup;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Directory of the ledgers (tmpfs: gone after a reboot, as are the changes).
pub const STATE_DIR: &str = dmalab_core::ledger::STATE_DIR;

/// A sysctl (or other single-value file) changed for the run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SettingChange {
    /// The file, e.g. /proc/sys/vm/page-cluster.
    pub path: PathBuf,
    /// Its value before the run, restored afterwards.
    pub old: String,
    /// The value the run set.
    pub new: String,
}

/// Everything one run changed on the host.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostChanges {
    /// The dmalab process that made the changes.
    pub owner_pid: u32,
    /// Its start time (clock ticks since boot, /proc/PID/stat field 22), so a
    /// recycled pid is not mistaken for the owner.
    pub owner_start: Option<u64>,
    /// Memory cgroup created.
    pub cgroup: Option<PathBuf>,
    /// zram device number taken with hot_add.
    pub zram_id: Option<u32>,
    /// Swap areas switched on (swapoff'd afterwards).
    pub swapon: Vec<PathBuf>,
    /// Swap file created (deleted afterwards).
    pub swap_file: Option<PathBuf>,
    /// Block devices given a swap header (zeroed again afterwards, so the
    /// device is back to holding no signature).
    #[serde(default)]
    pub swap_header_written: Vec<PathBuf>,
    /// Settings changed, in order (restored in reverse).
    pub settings: Vec<SettingChange>,
}

impl HostChanges {
    /// True when nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.cgroup.is_none()
            && self.zram_id.is_none()
            && self.swapon.is_empty()
            && self.swap_file.is_none()
            && self.swap_header_written.is_empty()
            && self.settings.is_empty()
    }
}

/// The ledger of the running process. Dropping it undoes every change.
pub struct Ledger {
    path: PathBuf,
    changes: HostChanges,
    undone: bool,
}

impl Ledger {
    /// Starts a ledger for this process under `dir` (normally [`STATE_DIR`]).
    pub fn create(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let pid = std::process::id();
        let l = Self {
            path: dir.join(format!("page-{pid}.json")),
            changes: HostChanges {
                owner_pid: pid,
                owner_start: start_time(pid),
                ..HostChanges::default()
            },
            undone: false,
        };
        l.persist()?;
        Ok(l)
    }

    fn persist(&self) -> io::Result<()> {
        let text = serde_json::to_string_pretty(&self.changes).map_err(io::Error::other)?;
        dmalab_core::output::write_atomic(&self.path, text.as_bytes())
    }

    /// Records a change (call *before* making it).
    pub fn record(&mut self, f: impl FnOnce(&mut HostChanges)) -> io::Result<()> {
        f(&mut self.changes);
        self.persist()
    }

    /// What was recorded so far.
    pub fn changes(&self) -> &HostChanges {
        &self.changes
    }

    /// Undoes every change, removes the ledger file and returns what went
    /// wrong (empty when all was undone).
    pub fn undo(&mut self) -> Vec<String> {
        if self.undone {
            return Vec::new();
        }
        self.undone = true;
        let (_, errors) = undo_changes(&self.changes);
        if errors.is_empty() {
            let _ = fs::remove_file(&self.path);
        }
        errors
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        for e in self.undo() {
            eprintln!("dmalab: warning: cleanup: {e}");
        }
    }
}

/// Writes `value` to a setting file, recording the old value first.
pub fn change_setting(ledger: &mut Ledger, path: &Path, value: &str) -> io::Result<()> {
    let old = fs::read_to_string(path)?.trim().to_string();
    ledger.record(|c| {
        c.settings.push(SettingChange {
            path: path.to_path_buf(),
            old: old.clone(),
            new: value.to_string(),
        })
    })?;
    fs::write(path, value)
}

/// Undoes `c`; returns (what was done, what failed).
pub fn undo_changes(c: &HostChanges) -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut errors = Vec::new();
    if let Some(cg) = &c.cgroup {
        if cg.exists() {
            match cgroup::remove_dir(cg, Duration::from_secs(10)) {
                Ok(()) => done.push(format!("removed cgroup {}", cg.display())),
                Err(e) => errors.push(format!("cannot remove cgroup {}: {e}", cg.display())),
            }
        }
    }
    let active: Vec<PathBuf> = dmalab_core::sys::swaps::read_swaps()
        .into_iter()
        .map(|s| s.path)
        .collect();
    for p in c.swapon.iter().rev() {
        if !active.iter().any(|a| a == p) {
            continue;
        }
        match crate::swap::swapoff(p) {
            Ok(()) => done.push(format!("swapoff {}", p.display())),
            Err(e) => errors.push(format!("cannot swapoff {}: {e}", p.display())),
        }
    }
    for dev in &c.swap_header_written {
        let wipe = || -> io::Result<()> {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().write(true).open(dev)?;
            f.write_all(&[0u8; 4096])?;
            f.sync_all()
        };
        match wipe() {
            Ok(()) => done.push(format!("wiped the swap header off {}", dev.display())),
            Err(e) => errors.push(format!(
                "cannot wipe the swap header off {}: {e}",
                dev.display()
            )),
        }
    }
    if let Some(id) = c.zram_id {
        match crate::swap::zram_remove(id) {
            Ok(true) => done.push(format!("removed /dev/zram{id}")),
            Ok(false) => {}
            Err(e) => errors.push(format!("cannot remove /dev/zram{id}: {e}")),
        }
    }
    if let Some(f) = &c.swap_file {
        match fs::remove_file(f) {
            Ok(()) => done.push(format!("deleted swap file {}", f.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => errors.push(format!("cannot delete swap file {}: {e}", f.display())),
        }
    }
    for s in c.settings.iter().rev() {
        // A setting inside our own cgroup went away with it.
        if !s.path.exists() {
            continue;
        }
        let cur = fs::read_to_string(&s.path).map(|v| v.trim().to_string());
        if cur.as_deref().ok() == Some(s.old.as_str()) {
            continue;
        }
        match fs::write(&s.path, &s.old) {
            Ok(()) => done.push(format!("restored {} = {}", s.path.display(), s.old)),
            Err(e) => errors.push(format!(
                "cannot restore {} to {}: {e}",
                s.path.display(),
                s.old
            )),
        }
    }
    (done, errors)
}

/// True when `pid` exists.
pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Start time of `pid` in clock ticks since boot (/proc/PID/stat field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    dmalab_core::ledger::process_start_time(pid)
}

fn owner_alive(c: &HostChanges) -> bool {
    pid_alive(c.owner_pid) && (c.owner_start.is_none() || start_time(c.owner_pid) == c.owner_start)
}

/// What a cleanup found and did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CleanupReport {
    /// Ledgers of dead owners that were processed.
    pub ledgers: Vec<PathBuf>,
    /// Each undo step taken.
    pub done: Vec<String>,
    /// Each step that failed.
    pub errors: Vec<String>,
    /// Ledgers of runs still alive (left alone).
    pub live: Vec<u32>,
}

/// Undoes the changes of every dead run recorded under `dir`, then removes
/// orphaned `dmalab-page-<pid>` cgroups no ledger mentioned.
pub fn cleanup_leftovers(dir: &Path) -> CleanupReport {
    let mut r = CleanupReport::default();
    for f in dmalab_core::ledger::ledger_files(dir, "page-") {
        let Some(c) = fs::read_to_string(&f)
            .ok()
            .and_then(|t| serde_json::from_str::<HostChanges>(&t).ok())
        else {
            r.errors.push(format!(
                "{}: unreadable ledger; remove it by hand after checking",
                f.display()
            ));
            continue;
        };
        if owner_alive(&c) {
            r.live.push(c.owner_pid);
            continue;
        }
        let (done, errors) = undo_changes(&c);
        r.done.extend(done);
        if errors.is_empty() {
            let _ = fs::remove_file(&f);
        }
        r.errors.extend(errors);
        r.ledgers.push(f);
    }
    // The process ledgers of load and probe (hugetlb pools, scratch and
    // temporary files) live in the same directory.
    let core = dmalab_core::ledger::cleanup_dead(dir);
    r.done.extend(core.done);
    r.errors.extend(core.errors);
    r.live.extend(core.live);
    if let Some(h) = cgroup::detect() {
        for cg in cgroup::leftovers(&h) {
            match cgroup::remove_dir(&cg, Duration::from_secs(5)) {
                Ok(()) => r.done.push(format!("removed cgroup {}", cg.display())),
                Err(e) => r
                    .errors
                    .push(format!("cannot remove cgroup {}: {e}", cg.display())),
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_restores_settings_and_vanishes() {
        let dir = tempfile::tempdir().unwrap();
        let setting = dir.path().join("knob");
        fs::write(&setting, "3\n").unwrap();
        {
            let mut l = Ledger::create(dir.path()).unwrap();
            change_setting(&mut l, &setting, "0").unwrap();
            assert_eq!(fs::read_to_string(&setting).unwrap(), "0");
            let saved: HostChanges = serde_json::from_str(
                &fs::read_to_string(dir.path().join(format!("page-{}.json", std::process::id())))
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(saved.settings[0].old, "3");
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
        fs::write(&setting, "0").unwrap();
        let dead = HostChanges {
            owner_pid: u32::MAX - 1,
            settings: vec![SettingChange {
                path: setting.clone(),
                old: "3".into(),
                new: "0".into(),
            }],
            ..HostChanges::default()
        };
        fs::write(
            dir.path().join("page-1.json"),
            serde_json::to_string(&dead).unwrap(),
        )
        .unwrap();
        let live = HostChanges {
            owner_pid: std::process::id(),
            owner_start: start_time(std::process::id()),
            ..HostChanges::default()
        };
        fs::write(
            dir.path().join("page-2.json"),
            serde_json::to_string(&live).unwrap(),
        )
        .unwrap();
        let r = cleanup_leftovers(dir.path());
        assert_eq!(fs::read_to_string(&setting).unwrap(), "3");
        assert_eq!(r.live, vec![std::process::id()]);
        assert!(!dir.path().join("page-1.json").exists());
        assert!(dir.path().join("page-2.json").exists());
    }

    #[test]
    fn own_start_time_is_known() {
        assert!(start_time(std::process::id()).is_some());
    }
}
