//! What the host has for DMA experiments, and the host knobs dmalab may turn.
//!
//! * [`info`]: one read-only report (`dmalab info`): CPU, caches, NUMA,
//!   memory, kernel, io_uring, NVMe, block devices and the write guard's
//!   verdict, RDMA, GPUs, hugepages, swap, cgroups, resctrl, PMUs, DDIO.
//! * [`ddio`]: Intel DDIO per PCIe root port and the I/O LLC ways
//!   (`dmalab ddio`, the `ddio` key of `dmalab run`), journaled under
//!   `/run/dmalab` before every write and always restored.
//!
//! Every file is read through a [`HostRoot`], so tests run the same code on
//! a fake `/sys`, `/proc` and `/dev` tree.

pub mod ddio;
pub mod info;

use std::path::{Path, PathBuf};

/// The directory that stands for `/`: the real root, or a test's fixture
/// tree holding `sys/`, `proc/`, `dev/` and `run/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoot(PathBuf);

impl HostRoot {
    /// The running system.
    pub fn system() -> Self {
        Self(PathBuf::from("/"))
    }

    /// A fixture tree standing for `/`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self(dir.into())
    }

    /// True for the running system's `/`.
    pub fn is_system(&self) -> bool {
        self.0 == Path::new("/")
    }

    /// `abs` (an absolute path such as `/sys/bus/pci`) under this root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.0.join(abs.trim_start_matches('/'))
    }

    /// Reads a small text file under the root, trimmed.
    pub fn read(&self, abs: &str) -> Option<String> {
        read_trim(&self.path(abs))
    }
}

/// A small text file, trimmed; None when unreadable.
pub(crate) fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Entries of a directory, sorted by name (empty when unreadable).
pub(crate) fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|a| natural_key(a));
    v
}

/// Sort key that orders `cpu2` before `cpu10`.
fn natural_key(s: &str) -> (String, u64, String) {
    let start = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
    let end = s[start..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(s.len(), |e| start + e);
    (
        s[..start].to_string(),
        s[start..end].parse().unwrap_or(0),
        s[end..].to_string(),
    )
}
