//! The host description every result carries: what machine, kernel and
//! settings produced the figures, and what device was the target.

use serde::{Deserialize, Serialize};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The machine a result was measured on.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    /// Host name.
    pub hostname: String,
    /// CPU model string from /proc/cpuinfo.
    pub cpu_model: String,
    /// CPU vendor id (`GenuineIntel`, `AuthenticAMD`).
    pub cpu_vendor: String,
    /// Logical CPUs online.
    pub cpus_online: usize,
    /// CPUs this process may run on.
    pub cpus_allowed: String,
    /// NUMA nodes with memory.
    pub numa_nodes: usize,
    /// `uname -r`.
    pub kernel: String,
    /// Total memory, bytes.
    pub mem_total_bytes: u64,
    /// Available memory when the run started, bytes.
    pub mem_available_bytes: u64,
    /// Share of CPU time stolen by the hypervisor since boot, percent
    /// (a VM with high steal time gives noisy figures).
    pub steal_since_boot_pct: f64,
    /// True when a hypervisor is present (the `hypervisor` CPU flag).
    pub virtualized: bool,
    /// Transparent huge page setting (`always [madvise] never`, selected
    /// value only).
    pub thp_enabled: String,
    /// Clock source in use (`tsc`, `kvm-clock`, ...).
    pub clocksource: String,
    /// The target device, when the command has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<DeviceInfo>,
}

/// A block device (or the one under a file's filesystem).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceInfo {
    /// The path the user named.
    pub path: String,
    /// `file`, `block`, `char` (NVMe generic device).
    pub kind: String,
    /// Kernel name of the device holding the data (`vda`, `loop3`, `nvme0n1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_device: Option<String>,
    /// Whole-disk kernel name when `block_device` is a partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    /// Model string from sysfs, or the driver name when there is none.
    pub model: String,
    /// Size of the target (file length or device capacity), bytes.
    pub size_bytes: u64,
    /// Logical block size, bytes.
    pub logical_block_size: u64,
    /// Physical block size, bytes.
    pub physical_block_size: u64,
    /// Filesystem type when the target is a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

impl HostInfo {
    /// Describes this host (cheap: a few /proc and /sys reads).
    pub fn collect() -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            crate::sys::cpuinfo::cpuinfo_field(&cpuinfo, name)
                .unwrap_or_default()
                .to_string()
        };
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem = |name: &str| {
            meminfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024)
        };
        let thp = read_trim("/sys/kernel/mm/transparent_hugepage/enabled")
            .and_then(|s| {
                s.split_whitespace()
                    .find(|w| w.starts_with('['))
                    .map(|w| w.trim_matches(['[', ']']).to_string())
            })
            .unwrap_or_else(|| "unavailable".into());
        let numa_nodes = read_trim("/sys/devices/system/node/has_memory")
            .map(|s| crate_cpu_count(&s))
            .unwrap_or(1)
            .max(1);
        let mut uts: libc::utsname = unsafe_zeroed_utsname();
        // SAFETY: uname fills the struct we own; it only fails on a bad pointer.
        let kernel = if unsafe { libc::uname(&mut uts) } == 0 {
            // SAFETY: uname NUL-terminates release and nodename.
            unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        };
        let hostname = read_trim("/proc/sys/kernel/hostname").unwrap_or_default();
        Self {
            hostname,
            cpu_model: field("model name"),
            cpu_vendor: field("vendor_id"),
            cpus_online: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpus_allowed: crate::cpus::format_cpu_list(&crate::cpus::allowed_cpus()),
            numa_nodes,
            kernel,
            mem_total_bytes: mem("MemTotal:"),
            mem_available_bytes: mem("MemAvailable:"),
            steal_since_boot_pct: CpuTimes::read()
                .map_or(0.0, |t| t.steal_pct_since(&CpuTimes::default())),
            virtualized: crate::sys::cpuinfo::cpu_flags(&cpuinfo).contains(&"hypervisor"),
            thp_enabled: thp,
            clocksource: read_trim(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .unwrap_or_default(),
            target: None,
        }
    }

    /// Same, with the target device described.
    pub fn with_target(mut self, path: &Path) -> Self {
        self.target = DeviceInfo::describe(path);
        self
    }
}

fn unsafe_zeroed_utsname() -> libc::utsname {
    // SAFETY: utsname is an array-of-chars struct; all zeroes is valid.
    unsafe { std::mem::zeroed() }
}

/// Counts CPUs or nodes in a list like `0-3,6`.
fn crate_cpu_count(list: &str) -> usize {
    list.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => {
                b.parse::<usize>()
                    .unwrap_or(0)
                    .saturating_sub(a.parse().unwrap_or(0))
                    + 1
            }
            None => 1,
        })
        .sum()
}

/// Aggregate CPU time counters from /proc/stat (in clock ticks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// All ticks (user+nice+system+idle+iowait+irq+softirq+steal).
    pub total: u64,
    /// Ticks stolen by the hypervisor.
    pub steal: u64,
}

impl CpuTimes {
    /// Reads the `cpu` line of /proc/stat.
    pub fn read() -> Option<Self> {
        let stat = fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() < 8 {
            return None;
        }
        Some(Self {
            total: v.iter().sum(),
            steal: v[7],
        })
    }

    /// Steal time between `earlier` and `self`, percent of all CPU time.
    pub fn steal_pct_since(&self, earlier: &CpuTimes) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        100.0 * self.steal.saturating_sub(earlier.steal) as f64 / total as f64
    }
}

/// Steal time per CPU, read from /proc/stat: how long the hypervisor ran
/// something else while a virtual CPU was ready to run. When the host
/// pauses the guest (on the development VM: 10-30 ms every 100 ms while
/// its virtio disk is busy), every CPU shows it, and a device's
/// completions wait with it.
#[derive(Clone, Debug, Default)]
pub struct StealMeter {
    last: Vec<u64>,
    ns_per_tick: u64,
}

impl StealMeter {
    /// Takes the first reading (all zeros where /proc/stat is unreadable).
    pub fn start() -> Self {
        // SAFETY: sysconf only reads a configuration value.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = if hz > 0 { hz as u64 } else { 100 };
        Self {
            last: read_steal_ticks().unwrap_or_default(),
            ns_per_tick: 1_000_000_000 / hz,
        }
    }

    /// Steal time since the previous reading, nanoseconds: the most any one
    /// CPU lost (a whole-VM pause shows on every CPU; the sum would count
    /// it once per CPU). Resolution is one clock tick (10 ms at USER_HZ 100).
    pub fn take(&mut self) -> u64 {
        let Some(now) = read_steal_ticks() else {
            return 0;
        };
        let most = now
            .iter()
            .zip(self.last.iter().chain(std::iter::repeat(&0)))
            .map(|(n, l)| n.saturating_sub(*l))
            .max()
            .unwrap_or(0);
        self.last = now;
        most * self.ns_per_tick
    }
}

fn read_steal_ticks() -> Option<Vec<u64>> {
    Some(parse_steal_ticks(&fs::read_to_string("/proc/stat").ok()?))
}

/// Steal ticks of each `cpuN` line of /proc/stat text, in line order.
pub fn parse_steal_ticks(stat: &str) -> Vec<u64> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .filter_map(|l| l.split_whitespace().nth(8)?.parse().ok())
        .collect()
}

/// Sysfs directory (`/sys/dev/block/MAJ:MIN`) for a device number.
pub fn sysfs_for_devno(major: u32, minor: u32) -> PathBuf {
    PathBuf::from(format!("/sys/dev/block/{major}:{minor}"))
}

/// Kernel name (`vda1`) of a sysfs block directory.
fn kernel_name(sys: &Path) -> Option<String> {
    fs::canonicalize(sys)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// Whole-disk sysfs directory: a partition's parent, or itself.
pub fn disk_sysfs(sys: &Path) -> PathBuf {
    let canon = fs::canonicalize(sys).unwrap_or_else(|_| sys.to_path_buf());
    if canon.join("partition").exists() {
        if let Some(parent) = canon.parent() {
            return parent.to_path_buf();
        }
    }
    canon
}

/// The block device holding a path: the device itself for a block special
/// file, the filesystem's device for a regular file or directory.
pub fn block_sysfs_for_path(path: &Path) -> Option<PathBuf> {
    let meta = fs::metadata(path).ok()?;
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let sys = sysfs_for_devno(libc::major(dev), libc::minor(dev));
    sys.exists().then_some(sys)
}

/// Filesystem type of the mount holding `path`, from /proc/self/mountinfo
/// (longest matching mount point wins).
pub fn filesystem_type(path: &Path) -> Option<String> {
    let canon = fs::canonicalize(path)
        .ok()
        .or_else(|| fs::canonicalize(path.parent()?).ok())?;
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mp), Some(fstype)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let mp = unescape_mount(mp);
        if canon.starts_with(&mp) && best.as_ref().is_none_or(|(len, _)| mp.len() >= *len) {
            best = Some((mp.len(), fstype.to_string()));
        }
    }
    best.map(|(_, t)| t)
}

/// Undoes the octal escapes (`\040` for a space) of /proc mount tables.
pub fn unescape_mount(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v as char);
                i += 4;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

impl DeviceInfo {
    /// Describes the target at `path` (a file, a block device or an NVMe
    /// generic character device). None when the path does not exist.
    pub fn describe(path: &Path) -> Option<Self> {
        let meta = fs::metadata(path).ok()?;
        let ft = meta.file_type();
        let kind = if ft.is_block_device() {
            "block"
        } else if ft.is_char_device() {
            "char"
        } else {
            "file"
        };
        let mut info = DeviceInfo {
            path: path.display().to_string(),
            kind: kind.into(),
            ..Default::default()
        };
        if ft.is_char_device() {
            // The NVMe engine fills in what it learns from Identify.
            return Some(info);
        }
        let sys = block_sysfs_for_path(path);
        if let Some(sys) = &sys {
            let disk = disk_sysfs(sys);
            info.block_device = kernel_name(sys);
            let disk_name = kernel_name(&disk);
            if disk_name != info.block_device {
                info.disk = disk_name;
            }
            let q = disk.join("queue");
            info.logical_block_size = read_trim(q.join("logical_block_size"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(512);
            info.physical_block_size = read_trim(q.join("physical_block_size"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(info.logical_block_size);
            info.model = read_trim(disk.join("device/model"))
                .filter(|m| !m.is_empty())
                .or_else(|| {
                    fs::read_link(disk.join("device/driver"))
                        .ok()
                        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                })
                .or_else(|| {
                    // loop, zram, dm: the name prefix says what it is.
                    info.block_device
                        .as_ref()
                        .map(|n| n.trim_end_matches(|c: char| c.is_ascii_digit()).to_string())
                })
                .unwrap_or_else(|| "unknown".into());
        }
        if ft.is_block_device() {
            info.size_bytes = sys
                .as_ref()
                .and_then(|s| read_trim(s.join("size")))
                .and_then(|s| s.parse::<u64>().ok())
                .map_or(0, |sectors| sectors * 512);
        } else {
            info.size_bytes = meta.len();
            info.filesystem = filesystem_type(path);
        }
        Some(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_ticks_come_from_each_cpu_line_not_the_total() {
        let stat = "cpu  3309857 18755 520633 1276494 248019 0 59264 170496 0 0\n\
                    cpu0 1603212 4218 292795 584341 220055 0 4772 85457 0 0\n\
                    cpu1 1706644 14537 227838 692152 27963 0 54492 85038 0 0\n\
                    intr 123 4 5\n";
        assert_eq!(parse_steal_ticks(stat), vec![85457, 85038]);
    }

    #[test]
    fn collects_something_sane() {
        let h = HostInfo::collect();
        assert!(h.cpus_online >= 1);
        assert!(h.mem_total_bytes > 0);
        assert!(!h.kernel.is_empty());
    }

    #[test]
    fn describes_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, vec![1u8; 8192]).unwrap();
        let d = DeviceInfo::describe(&p).unwrap();
        assert_eq!(d.kind, "file");
        assert_eq!(d.size_bytes, 8192);
        assert!(d.filesystem.is_some());
    }

    #[test]
    fn mount_unescape() {
        assert_eq!(unescape_mount("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
    }

    #[test]
    fn counts_lists() {
        assert_eq!(crate_cpu_count("0-3,6"), 5);
        assert_eq!(crate_cpu_count("0"), 1);
    }
}
