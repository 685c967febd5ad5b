//! The DDIO journal: the original bytes and MSR values, written to
//! `/run/dmalab/ddio-<pid>.json` *before* each register write.
//!
//! It follows the ledger of `dmalab page` (`dmalab_page::state`): the same
//! directory (tmpfs, so it goes with a reboot, as do the register changes),
//! the owner's pid and start time so a recycled pid is not taken for the
//! owner, the file written whole through `dmalab_core::output::write_atomic`,
//! and the same two ways back: the owner restores on exit, error, signal or
//! panic, and a later `dmalab ddio restore`, `dmalab cleanup` or the next
//! `dmalab ddio`/`dmalab run` restores what a killed owner left.

use super::regs::Registers;
use super::topology::is_bdf;
use crate::{dir_names, HostRoot};
use dmalab_page::state::{pid_alive, start_time, STATE_DIR};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// File name prefix of DDIO journals in the state directory.
pub const PREFIX: &str = "ddio-";

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

/// Everything one process changed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Journal {
    /// The dmalab process that made the changes.
    pub owner_pid: u32,
    /// Its start time (clock ticks since boot), as `dmalab page` records it.
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
            owner_start: start_time(pid),
            ..Self::default()
        }
    }

    /// True when nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.config.is_empty() && self.msr.is_empty()
    }

    fn owner_alive(&self) -> bool {
        pid_alive(self.owner_pid)
            && (self.owner_start.is_none() || start_time(self.owner_pid) == self.owner_start)
    }
}

/// The state directory under `root` (`/run/dmalab`).
pub fn state_dir(root: &HostRoot) -> PathBuf {
    root.path(STATE_DIR)
}

/// This process's journal file under `root`.
pub fn own_path(root: &HostRoot) -> PathBuf {
    state_dir(root).join(format!("{PREFIX}{}.json", std::process::id()))
}

/// Writes the journal whole (temporary file, then rename).
pub fn persist(path: &Path, j: &Journal) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(j).map_err(io::Error::other)?;
    dmalab_core::output::write_atomic(path, text.as_bytes())
}

/// Writes every original value back, newest change first, and reads each
/// back to confirm. Returns (what was restored, what failed).
pub fn restore(j: &Journal, regs: &Registers) -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut errors = Vec::new();
    for c in j.config.iter().rev() {
        let what = format!("{} config byte {:#x}", c.bdf, c.offset);
        let put = || -> io::Result<u8> {
            if regs.config.read_u8(&c.bdf, c.offset)? != c.original {
                regs.config.write_u8(&c.bdf, c.offset, c.original)?;
            }
            regs.config.read_u8(&c.bdf, c.offset)
        };
        match put() {
            Ok(v) if v == c.original => {
                done.push(format!("restored {what} = {:#04x} (read back)", c.original))
            }
            Ok(v) => errors.push(format!(
                "{what} reads {v:#04x} after restoring {:#04x}",
                c.original
            )),
            Err(e) => errors.push(format!("cannot restore {what} to {:#04x}: {e}", c.original)),
        }
    }
    for m in j.msr.iter().rev() {
        let what = format!("MSR {:#x} on CPU {}", m.msr, m.cpu);
        let put = || -> io::Result<u64> {
            if regs.msr.read(m.cpu, m.msr)? != m.original {
                regs.msr.write(m.cpu, m.msr, m.original)?;
            }
            regs.msr.read(m.cpu, m.msr)
        };
        match put() {
            Ok(v) if v == m.original => {
                done.push(format!("restored {what} = {:#x} (read back)", m.original))
            }
            Ok(v) => errors.push(format!(
                "{what} reads {v:#x} after restoring {:#x}",
                m.original
            )),
            Err(e) => errors.push(format!("cannot restore {what} to {:#x}: {e}", m.original)),
        }
    }
    (done, errors)
}

/// What undoing leftovers found and did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Leftovers {
    /// Journals of dead owners that were processed.
    pub journals: Vec<PathBuf>,
    /// Each restore step taken.
    pub done: Vec<String>,
    /// Each step that failed (the journal is kept).
    pub errors: Vec<String>,
    /// Owners still alive (their journals left alone).
    pub live: Vec<u32>,
}

/// Journal files under `root`'s state directory, sorted.
pub fn journal_files(root: &HostRoot) -> Vec<PathBuf> {
    let dir = state_dir(root);
    dir_names(&dir)
        .into_iter()
        .filter(|n| {
            n.strip_prefix(PREFIX)
                .and_then(|r| r.strip_suffix(".json"))
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|n| dir.join(n))
        .collect()
}

/// Restores what every dead owner's journal under `root` recorded, and
/// removes each journal whose values all read back as the originals.
pub fn restore_leftovers(root: &HostRoot, regs: &Registers) -> Leftovers {
    let mut r = Leftovers::default();
    for f in journal_files(root) {
        let Some(j) = fs::read_to_string(&f)
            .ok()
            .and_then(|t| serde_json::from_str::<Journal>(&t).ok())
        else {
            r.errors.push(format!(
                "{}: unreadable DDIO journal; check the registers it names and remove it by hand",
                f.display()
            ));
            continue;
        };
        if j.owner_pid == std::process::id() || j.owner_alive() {
            r.live.push(j.owner_pid);
            continue;
        }
        if j.config.iter().any(|c| !is_bdf(&c.bdf)) {
            r.errors.push(format!(
                "{}: names a malformed PCI address; left alone",
                f.display()
            ));
            continue;
        }
        let (done, errors) = restore(&j, regs);
        r.done.extend(done);
        if errors.is_empty() {
            let _ = fs::remove_file(&f);
        }
        r.errors.extend(errors);
        r.journals.push(f);
    }
    r
}
