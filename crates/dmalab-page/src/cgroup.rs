//! The memory cgroup the measured process runs in (v1 or v2, whichever
//! hierarchy has the memory controller on this host).
//!
//! dmalab's cgroups live at the top of the memory hierarchy and are named
//! `dmalab-page-<owner pid>`, so a later start (or `dmalab cleanup`) can tell
//! a leftover of a killed run (owner dead) from a live one.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Prefix of every cgroup dmalab page creates.
pub const PREFIX: &str = "dmalab-page-";

/// Which cgroup interface holds the memory controller.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    /// cgroup v1 `memory` hierarchy.
    V1,
    /// cgroup v2 unified hierarchy.
    V2,
}

/// Where the memory controller is mounted.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemoryHierarchy {
    /// v1 or v2.
    pub version: Version,
    /// Mount point of that hierarchy's root.
    pub root: PathBuf,
}

/// Finds the memory controller: a v1 `cgroup` mount with the `memory`
/// option, else a `cgroup2` mount whose root lists `memory`.
pub fn detect() -> Option<MemoryHierarchy> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut v2: Option<PathBuf> = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(dash) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        let (Some(mp), Some(fstype), Some(opts)) = (f.get(4), f.get(dash + 1), f.get(dash + 3))
        else {
            continue;
        };
        let mp = PathBuf::from(dmalab_core::host::unescape_mount(mp));
        if *fstype == "cgroup" && opts.split(',').any(|o| o == "memory") {
            return Some(MemoryHierarchy {
                version: Version::V1,
                root: mp,
            });
        }
        if *fstype == "cgroup2" && v2.is_none() {
            let ctl = fs::read_to_string(mp.join("cgroup.controllers")).unwrap_or_default();
            if ctl.split_whitespace().any(|c| c == "memory") {
                v2 = Some(mp);
            }
        }
    }
    v2.map(|root| MemoryHierarchy {
        version: Version::V2,
        root,
    })
}

/// Errors from cgroup set-up.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No memory controller mounted.
    #[error("no memory cgroup controller is mounted (neither cgroup v1 'memory' nor cgroup v2 with 'memory' in cgroup.controllers); mount one or run without --memory-limit")]
    NoController,
    /// A file operation failed.
    #[error("{what} {path}: {cause}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |cause| CgroupError::Io { what, path, cause }
}

/// A memory cgroup created by this run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemCgroup {
    /// v1 or v2.
    pub version: Version,
    /// Its directory.
    pub path: PathBuf,
}

impl MemCgroup {
    /// Path the cgroup of `owner` gets in `h`.
    pub fn path_for(h: &MemoryHierarchy, owner: u32) -> PathBuf {
        h.root.join(format!("{PREFIX}{owner}"))
    }

    /// Creates `dmalab-page-<owner>` with a memory limit (and, on v1, a
    /// swappiness). The directory must not exist yet.
    pub fn create(
        h: &MemoryHierarchy,
        owner: u32,
        limit_bytes: u64,
        swappiness: Option<u32>,
    ) -> Result<Self, CgroupError> {
        let path = Self::path_for(h, owner);
        if h.version == Version::V2 {
            // The root must hand the memory controller to its children.
            let sc = h.root.join("cgroup.subtree_control");
            let cur = fs::read_to_string(&sc).unwrap_or_default();
            if !cur.split_whitespace().any(|c| c == "memory") {
                fs::write(&sc, "+memory").map_err(|e| {
                    if e.raw_os_error() == Some(libc::EBUSY) {
                        CgroupError::Io {
                            what: "cgroup v2: the root of this cgroup namespace holds processes and cannot hand the memory controller to children (run dmalab outside the container, or enable +memory there first);",
                            path: sc.clone(),
                            cause: e,
                        }
                    } else {
                        CgroupError::Io {
                            what: "enable memory controller in",
                            path: sc.clone(),
                            cause: e,
                        }
                    }
                })?;
            }
        }
        fs::create_dir(&path).map_err(io_err("create cgroup", &path))?;
        let cg = Self {
            version: h.version,
            path,
        };
        let r = (|| {
            match h.version {
                Version::V1 => {
                    cg.write("memory.limit_in_bytes", &limit_bytes.to_string())?;
                    if let Some(s) = swappiness {
                        cg.write("memory.swappiness", &s.to_string())?;
                    }
                }
                Version::V2 => {
                    cg.write("memory.max", &limit_bytes.to_string())?;
                    // Stay out of the OOM killer's way as long as swap lasts:
                    // no separate swap limit.
                    let _ = cg.write("memory.swap.max", "max");
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            let _ = cg.remove(Duration::from_secs(2));
            return Err(e);
        }
        Ok(cg)
    }

    fn write(&self, file: &'static str, value: &str) -> Result<(), CgroupError> {
        let p = self.path.join(file);
        fs::write(&p, value).map_err(io_err("write", &p))
    }

    /// The `cgroup.procs` file a process joins by writing its pid into.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// The cgroup's own major-fault count (memory.stat `pgmajfault`; on v1
    /// `total_pgmajfault` includes children, of which ours has none).
    pub fn stat(&self) -> CgroupStat {
        let text = fs::read_to_string(self.path.join("memory.stat")).unwrap_or_default();
        CgroupStat::parse(&text)
    }

    /// Times the kernel OOM-killed a process in this cgroup.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = match self.version {
            Version::V1 => ("memory.oom_control", "oom_kill"),
            Version::V2 => ("memory.events", "oom_kill"),
        };
        fs::read_to_string(self.path.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(key)).then(|| it.next()?.parse().ok())?
            })
            .unwrap_or(0)
    }

    /// Kills whatever still runs inside and removes the directory, retrying
    /// for up to `patience` while the kernel finishes tearing processes down.
    pub fn remove(&self, patience: Duration) -> io::Result<()> {
        remove_dir(&self.path, patience)
    }
}

/// Kills the processes in the cgroup at `path`, then removes it.
pub fn remove_dir(path: &Path, patience: Duration) -> io::Result<()> {
    let start = Instant::now();
    loop {
        for pid in procs(path) {
            // SAFETY: kill has no memory arguments; the pid comes from the
            // cgroup's own process list, which holds only our worker.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                if start.elapsed() > patience {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Pids listed in `<cgroup>/cgroup.procs`.
pub fn procs(path: &Path) -> Vec<u32> {
    fs::read_to_string(path.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Fault counters of a memory cgroup.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CgroupStat {
    /// Major faults charged to the cgroup.
    pub pgmajfault: u64,
    /// All faults charged to the cgroup.
    pub pgfault: u64,
}

impl CgroupStat {
    /// Parses memory.stat (v1 keys `pgmajfault`/`total_pgmajfault`, v2
    /// `pgmajfault`).
    pub fn parse(text: &str) -> Self {
        let mut s = Self::default();
        let mut total = Self::default();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse().ok())) else {
                continue;
            };
            match k {
                "pgmajfault" => s.pgmajfault = v,
                "pgfault" => s.pgfault = v,
                "total_pgmajfault" => total.pgmajfault = v,
                "total_pgfault" => total.pgfault = v,
                _ => {}
            }
        }
        Self {
            pgmajfault: s.pgmajfault.max(total.pgmajfault),
            pgfault: s.pgfault.max(total.pgfault),
        }
    }

    /// `self - earlier`, saturating.
    pub fn since(&self, earlier: &CgroupStat) -> CgroupStat {
        CgroupStat {
            pgmajfault: self.pgmajfault.saturating_sub(earlier.pgmajfault),
            pgfault: self.pgfault.saturating_sub(earlier.pgfault),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat() {
        let s = CgroupStat::parse(
            "cache 0\npgfault 100\npgmajfault 7\ntotal_pgfault 100\ntotal_pgmajfault 7\n",
        );
        assert_eq!(
            s,
            CgroupStat {
                pgmajfault: 7,
                pgfault: 100
            }
        );
        let s = CgroupStat::parse("anon 1\npgfault 5\npgmajfault 2\n");
        assert_eq!(s.pgmajfault, 2);
    }

    #[test]
    fn detects_something_on_linux() {
        // Not every CI container mounts a memory controller: only check
        // that detection does not panic and returns an existing path.
        if let Some(h) = detect() {
            assert!(h.root.exists());
        }
    }
}
