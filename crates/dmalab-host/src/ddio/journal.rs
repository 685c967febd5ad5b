//! DDIO's changes as steps of the one ledger ([`dmalab_core::ledger`]): the
//! original config-space byte or MSR value is recorded (fsync'd) *before*
//! each register write, as bytes to write back at an offset of the
//! register's file (`/sys/bus/pci/devices/BDF/config`; `/dev/cpu/N/msr`,
//! whose offset is the MSR number). The owner restores on exit, error,
//! signal or panic; a later `dmalab ddio restore`, `dmalab cleanup` or the
//! next `dmalab ddio`/`dmalab run` restores what a killed owner left.
//!
//! [`Journal`] is a read-only view of the DDIO steps of one ledger file
//! (and the format of the journals dmalab wrote before the one ledger,
//! which are still read).

use super::regs::Registers;
use crate::HostRoot;
use dmalab_core::ledger::{Cleanup, LedgerDir, Step, STATE_DIR};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// What the ledger calls DDIO's steps.
pub const BY: &str = "ddio";

/// One config-space byte as it was before dmalab changed it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConfigByte {
    /// The PCI function (root port), `0000:17:00.0`.
    pub bdf: String,
    /// Byte offset in its configuration space.
    pub offset: u64,
    /// The value before the first change.
    pub original: u8,
}

/// One MSR as it was before dmalab changed it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MsrValue {
    /// Logical CPU the MSR was written through.
    pub cpu: usize,
    /// MSR number.
    pub msr: u32,
    /// The value before the first change.
    pub original: u64,
}

/// The DDIO changes of one process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Journal {
    /// The dmalab process that made the changes.
    pub owner_pid: u32,
    /// Its start time (clock ticks since boot).
    pub owner_start: Option<u64>,
    /// Config-space bytes changed, in order (restored in reverse).
    pub config: Vec<ConfigByte>,
    /// MSRs changed, in order (restored in reverse).
    pub msr: Vec<MsrValue>,
}

impl Journal {
    /// An empty journal owned by this process.
    pub fn this_process() -> Self {
        let pid = std::process::id();
        Self {
            owner_pid: pid,
            owner_start: dmalab_core::ledger::process_start_time(pid),
            ..Self::default()
        }
    }

    /// True when nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.config.is_empty() && self.msr.is_empty()
    }
}

/// The state directory under `root` (`/run/dmalab`).
pub fn state_dir(root: &HostRoot) -> PathBuf {
    root.path(STATE_DIR)
}

/// The ledger directory under `root`.
pub fn ledger_dir(root: &HostRoot) -> LedgerDir {
    LedgerDir::at(state_dir(root))
}

/// `ROOT/sys/bus/pci/devices/BDF/config`.
pub fn config_file(root: &HostRoot, bdf: &str) -> PathBuf {
    root.path(&format!("/sys/bus/pci/devices/{bdf}/config"))
}

/// `ROOT/dev/cpu/N/msr`.
pub fn msr_file(root: &HostRoot, cpu: usize) -> PathBuf {
    root.path(&format!("/dev/cpu/{cpu}/msr"))
}

/// The step that restores config byte `offset` of `bdf` (reads its
/// current value as the original).
pub fn config_step(root: &HostRoot, bdf: &str, offset: u64) -> io::Result<Step> {
    Step::restore_bytes(
        &config_file(root, bdf),
        offset,
        1,
        &format!("{bdf} config byte {offset:#x}"),
    )
}

/// The step that restores MSR `msr` of CPU `cpu`.
pub fn msr_step(root: &HostRoot, cpu: usize, msr: u32) -> io::Result<Step> {
    Step::restore_bytes(
        &msr_file(root, cpu),
        u64::from(msr),
        8,
        &format!("MSR {msr:#x} on CPU {cpu}"),
    )
}

/// Writes `j` whole in the format dmalab used before the one ledger (kept
/// for tests of the upgrade path).
pub fn persist(path: &Path, j: &Journal) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(j).map_err(io::Error::other)?;
    dmalab_core::output::write_atomic(path, text.as_bytes())
}

/// The DDIO view of the ledger file `path` (either format), or None when
/// it cannot be read or holds no DDIO change.
pub fn read(root: &HostRoot, path: &Path) -> Option<Journal> {
    let l = ledger_dir(root).read(path).ok()?;
    let mut j = Journal {
        owner_pid: l.owner_pid,
        owner_start: l.owner_start,
        ..Journal::default()
    };
    for e in l.steps.iter().filter(|e| e.by == BY) {
        let Step::RestoreBytes {
            path, offset, old, ..
        } = &e.step
        else {
            continue;
        };
        let parent = |p: &Path| {
            p.parent()
                .and_then(|d| d.file_name())
                .map(|n| n.to_string_lossy().into_owned())
        };
        match (path.file_name().and_then(|n| n.to_str()), old.len()) {
            (Some("config"), 1) => j.config.push(ConfigByte {
                bdf: parent(path)?,
                offset: *offset,
                original: old[0],
            }),
            (Some("msr"), 8) => {
                let mut b = [0u8; 8];
                b.copy_from_slice(old);
                j.msr.push(MsrValue {
                    cpu: parent(path)?.parse().ok()?,
                    msr: u32::try_from(*offset).ok()?,
                    original: u64::from_le_bytes(b),
                });
            }
            _ => {}
        }
    }
    // A journal of the older format is DDIO's even when empty.
    let legacy = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("ddio-"));
    (legacy || !j.is_empty()).then_some(j)
}

/// Ledger files under `root`'s state directory that hold DDIO changes,
/// sorted.
pub fn journal_files(root: &HostRoot) -> Vec<PathBuf> {
    ledger_dir(root)
        .files()
        .into_iter()
        .filter(|p| read(root, p).is_some())
        .collect()
}

/// What undoing leftovers found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// Each restore step taken.
    pub done: Vec<String>,
    /// Each step that failed (its ledger entry is kept), and each ledger
    /// refused.
    pub errors: Vec<String>,
    /// Owners still alive that hold DDIO changes.
    pub live: Vec<u32>,
}

/// Undoes what every dead owner recorded under `root`'s ledger directory
/// (DDIO's steps and any other), and names the live owners of DDIO
/// changes.
pub fn restore_leftovers(root: &HostRoot, _regs: &Registers) -> Leftovers {
    let dir = ledger_dir(root);
    let r: Cleanup = dir.cleanup_dead();
    Leftovers {
        done: r
            .done
            .into_iter()
            .chain(r.left_alone.into_iter().map(|a| format!("left alone: {a}")))
            .collect(),
        errors: r.errors,
        live: journal_files(root)
            .iter()
            .filter_map(|p| read(root, p))
            .filter(|j| {
                j.owner_pid != std::process::id()
                    && dmalab_core::ledger::owner_alive(j.owner_pid, j.owner_start)
            })
            .map(|j| j.owner_pid)
            .collect(),
    }
}
