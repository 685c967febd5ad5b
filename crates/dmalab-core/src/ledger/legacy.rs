//! Ledger files of the formats before the one ledger (dmalab up to
//! 2026-11-27), translated into steps, so a user who upgrades between a
//! kill and the cleanup still gets the host back:
//!
//! * `proc-PID.json` (load, probe, run): hugetlb pools grown, files and
//!   directories created;
//! * `page-PID.json`: cgroup, zram device, swap areas, swap file, swap
//!   headers, settings;
//! * `ddio-PID.json`: config-space bytes and MSRs;
//! * `counters-PID.json`: resctrl monitoring groups.
//!
//! Those formats recorded bare paths: a file or scratch directory they name
//! is reported, not removed (nothing says it is still the one dmalab made);
//! settings, pools, registers, swap and kernel group directories are undone.

use super::{DirRemoval, Entry, LedgerFile, Step, FORMAT};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Deserialize)]
struct Owner {
    owner_pid: u32,
    owner_start: Option<u64>,
}

#[derive(Deserialize)]
struct Pool {
    path: PathBuf,
    added: u64,
}

#[derive(Deserialize)]
struct Proc {
    #[serde(default)]
    pools: Vec<Pool>,
    #[serde(default)]
    files: Vec<PathBuf>,
    #[serde(default)]
    dirs: Vec<PathBuf>,
}

#[derive(Deserialize)]
struct Setting {
    path: PathBuf,
    old: String,
}

#[derive(Deserialize)]
struct Page {
    cgroup: Option<PathBuf>,
    zram_id: Option<u32>,
    #[serde(default)]
    swapon: Vec<PathBuf>,
    swap_file: Option<PathBuf>,
    #[serde(default)]
    swap_header_written: Vec<PathBuf>,
    #[serde(default)]
    settings: Vec<Setting>,
}

#[derive(Deserialize)]
struct ConfigByte {
    bdf: String,
    offset: u64,
    original: u8,
}

#[derive(Deserialize)]
struct Msr {
    cpu: usize,
    msr: u32,
    original: u64,
}

#[derive(Deserialize)]
struct Ddio {
    #[serde(default)]
    config: Vec<ConfigByte>,
    #[serde(default)]
    msr: Vec<Msr>,
}

#[derive(Deserialize)]
struct Counters {
    groups: Vec<PathBuf>,
}

/// `0000:17:00.0`: what a PCI function's directory name may be.
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b':',
            10 => *c == b'.',
            11 => (b'0'..=b'7').contains(c),
            _ => c.is_ascii_hexdigit(),
        })
}

/// The host root a ledger directory `ROOT/run/dmalab` belongs to.
fn host_root(dir: &Path) -> PathBuf {
    dir.strip_prefix("/")
        .ok()
        .and_then(|_| {
            let p = dir.parent()?;
            (dir.file_name()? == "dmalab" && p.file_name()? == "run").then(|| p.parent())?
        })
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

/// Steps of an older ledger file `path` (in directory `dir`), or None when
/// it is not one.
pub(super) fn translate(dir: &Path, path: &Path, text: &str) -> Option<LedgerFile> {
    let name = path.file_name()?.to_str()?;
    let owner: Owner = serde_json::from_str(text).ok()?;
    let mut steps: Vec<(&str, Step)> = Vec::new();
    if name.starts_with("proc-") {
        let p: Proc = serde_json::from_str(text).ok()?;
        for f in p.files {
            steps.push((
                "scratch",
                Step::RemoveFile {
                    path: f,
                    ident: None,
                },
            ));
        }
        for d in p.dirs {
            steps.push((
                "scratch",
                Step::RemoveDir {
                    path: d,
                    ident: None,
                    how: DirRemoval::Tree,
                },
            ));
        }
        for pool in p.pools {
            steps.push((
                "hugetlb",
                Step::ShrinkPool {
                    path: pool.path,
                    pages: pool.added,
                },
            ));
        }
    } else if name.starts_with("page-") {
        // Recorded in the order the old undo ran it backwards: settings
        // first, the cgroup last (it was removed first).
        let p: Page = serde_json::from_str(text).ok()?;
        for s in p.settings {
            steps.push((
                "page",
                Step::RestoreSetting {
                    path: s.path,
                    old: s.old,
                    wrote: None,
                    ident: None,
                },
            ));
        }
        if let Some(f) = p.swap_file {
            steps.push((
                "page",
                Step::RemoveFile {
                    path: f,
                    ident: None,
                },
            ));
        }
        if let Some(id) = p.zram_id {
            steps.push(("page", Step::ZramRemove { id }));
        }
        for d in p.swap_header_written {
            steps.push((
                "page",
                Step::WipeSwapHeader {
                    path: d,
                    ident: None,
                },
            ));
        }
        for s in p.swapon {
            steps.push(("page", Step::Swapoff { path: s }));
        }
        if let Some(cg) = p.cgroup {
            steps.push((
                "page",
                Step::RemoveDir {
                    path: cg,
                    ident: None,
                    how: DirRemoval::Cgroup,
                },
            ));
        }
    } else if name.starts_with("ddio-") {
        let j: Ddio = serde_json::from_str(text).ok()?;
        if j.config.iter().any(|c| !is_bdf(&c.bdf)) {
            return None;
        }
        let root = host_root(dir);
        for c in j.config {
            steps.push((
                "ddio",
                Step::RestoreBytes {
                    path: root.join(format!("sys/bus/pci/devices/{}/config", c.bdf)),
                    offset: c.offset,
                    old: vec![c.original],
                    label: format!("{} config byte {:#x}", c.bdf, c.offset),
                    ident: None,
                },
            ));
        }
        for m in j.msr {
            steps.push((
                "ddio",
                Step::RestoreBytes {
                    path: root.join(format!("dev/cpu/{}/msr", m.cpu)),
                    offset: u64::from(m.msr),
                    old: m.original.to_le_bytes().to_vec(),
                    label: format!("MSR {:#x} on CPU {}", m.msr, m.cpu),
                    ident: None,
                },
            ));
        }
    } else if name.starts_with("counters-") {
        let c: Counters = serde_json::from_str(text).ok()?;
        for g in c.groups {
            steps.push((
                "counters",
                Step::RemoveDir {
                    path: g,
                    ident: None,
                    how: DirRemoval::Resctrl,
                },
            ));
        }
    } else {
        return None;
    }
    Some(LedgerFile {
        format: FORMAT,
        owner_pid: owner.owner_pid,
        owner_start: owner.owner_start,
        steps: steps
            .into_iter()
            .enumerate()
            .map(|(i, (by, step))| Entry {
                id: i as u64,
                by: by.to_string(),
                step,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_root_of_a_fixture_ledger_dir() {
        assert_eq!(host_root(Path::new("/run/dmalab")), Path::new("/"));
        assert_eq!(
            host_root(Path::new("/tmp/x/run/dmalab")),
            Path::new("/tmp/x")
        );
        assert_eq!(host_root(Path::new("/tmp/dmalab-0")), Path::new("/"));
        assert!(is_bdf("0000:17:00.0"));
        assert!(!is_bdf("../../../etc"));
    }
}
