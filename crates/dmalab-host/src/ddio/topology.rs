//! Where DDIO lives: which CPU this is, which PCIe root port a device hangs
//! off, one CPU per package, and how many ways the LLC has.

use crate::{dir_names, read_trim, HostRoot};
use dmalab_core::UsageError;
use std::fs;
use std::path::{Path, PathBuf};

/// Intel family 6 models whose PCIe root ports have `perfctrlsts_0` at
/// config offset 0x180 and whose IIO LLC ways sit in MSR 0xC8B: Skylake-SP /
/// Cascade Lake / Cooper Lake (0x55), Ice Lake-SP (0x6a), Ice Lake-D (0x6c),
/// Sapphire Rapids (0x8f), Emerald Rapids (0xcf). The offsets are those of
/// the Xeon Scalable datasheets, volume 2 (registers), as used by ddio-bench
/// (Farshin et al., ATC'20) and pmem/rpma's `tools/ddio.sh`; see docs/ddio.md.
pub const SUPPORTED_MODELS: &[(u32, &str)] = &[
    (0x55, "Skylake-SP / Cascade Lake-SP / Cooper Lake"),
    (0x6a, "Ice Lake-SP"),
    (0x6c, "Ice Lake-D"),
    (0x8f, "Sapphire Rapids"),
    (0xcf, "Emerald Rapids"),
];

pub use dmalab_core::sys::cpuinfo::CpuId;

/// Reads the first processor of `ROOT/proc/cpuinfo`.
pub fn cpu_id(root: &HostRoot) -> CpuId {
    CpuId::read(&root.path("/proc/cpuinfo"))
}

/// What DDIO control makes of a CPU.
pub trait DdioCpu {
    /// The Xeon generation when DDIO control supports this CPU.
    fn ddio_generation(&self) -> Option<&'static str>;
    /// Why DDIO cannot be controlled on this CPU, as the refusal says it.
    fn refusal(&self) -> String;
}

impl DdioCpu for CpuId {
    fn ddio_generation(&self) -> Option<&'static str> {
        if self.vendor != "GenuineIntel" || self.family != 6 {
            return None;
        }
        SUPPORTED_MODELS
            .iter()
            .find(|(m, _)| *m == self.model)
            .map(|(_, g)| *g)
    }

    fn refusal(&self) -> String {
        let models: Vec<String> = SUPPORTED_MODELS
            .iter()
            .map(|(m, _)| format!("{m:#x}"))
            .collect();
        format!(
            "not on this CPU: {} family {} model {:#x} ({}) is not an Intel Xeon with DDIO control; dmalab ddio knows Intel family 6 models {} (Skylake-SP and later)",
            if self.vendor.is_empty() { "unknown vendor" } else { &self.vendor },
            self.family,
            self.model,
            if self.model_name.is_empty() { "no model name" } else { &self.model_name },
            models.join(", ")
        )
    }
}

/// True for a PCI address `DDDD:BB:DD.F`.
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The sysfs directory of the PCI function a `--device` names: a PCI
/// address (`0000:17:00.0` or `17:00.0`), an NVMe device (`/dev/nvme0`,
/// `/dev/nvme0n1`, `/dev/ng0n1`) or a network interface (`eth0`).
pub fn resolve_device(root: &HostRoot, spec: &str) -> Result<PathBuf, UsageError> {
    let bad = |msg: String| UsageError::new("--device", msg);
    let full = if spec.len() == 7 {
        format!("0000:{spec}")
    } else {
        spec.to_string()
    };
    let link = if is_bdf(&full) {
        root.path(&format!("/sys/bus/pci/devices/{}", full.to_lowercase()))
    } else if let Some(name) = spec.strip_prefix("/dev/") {
        let ctrl = nvme_controller(name).ok_or_else(|| {
            bad(format!(
                "{spec} is not an NVMe device; name a PCI address (0000:17:00.0), an NVMe device (/dev/nvme0, /dev/nvme0n1, /dev/ng0n1) or a network interface"
            ))
        })?;
        root.path(&format!("/sys/class/nvme/{ctrl}/device"))
    } else if !spec.contains('/') && !spec.is_empty() {
        root.path(&format!("/sys/class/net/{spec}/device"))
    } else {
        return Err(bad(format!(
            "'{spec}' is neither a PCI address, an NVMe device nor a network interface"
        )));
    };
    fs::canonicalize(&link).map_err(|_| {
        bad(format!(
            "{spec}: no PCI device found at {} (see lspci, nvme list, ip link)",
            link.display()
        ))
    })
}

/// `nvme0n1`, `ng0n1`, `nvme0` -> `nvme0`.
fn nvme_controller(name: &str) -> Option<String> {
    let rest = name
        .strip_prefix("nvme")
        .or_else(|| name.strip_prefix("ng"))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    let ok_tail = tail.is_empty()
        || tail
            .strip_prefix('n')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (!digits.is_empty() && ok_tail).then(|| format!("nvme{digits}"))
}

/// Vendor and class of a PCI function directory.
pub fn vendor_class(dev: &Path) -> (Option<u32>, Option<u32>) {
    let hex = |f: &str| {
        read_trim(&dev.join(f))
            .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    };
    (hex("vendor"), hex("class"))
}

/// True for an Intel (0x8086) PCI-to-PCI bridge (class 0x0604xx).
pub fn is_intel_bridge(dev: &Path) -> bool {
    matches!(vendor_class(dev), (Some(0x8086), Some(c)) if c >> 8 == 0x0604)
}

/// The PCIe root port above `dev` (a canonical sysfs device directory),
/// found by walking up the directory tree to the last PCI function below
/// the host bridge (`pciDDDD:BB`): never by guessing bus numbers. Returns
/// its directory; a device directly on the root bus is its own top.
pub fn top_of(dev: &Path) -> Option<PathBuf> {
    let mut cur = dev.to_path_buf();
    loop {
        let parent = cur.parent()?.to_path_buf();
        let pname = parent.file_name()?.to_string_lossy().into_owned();
        if pname.starts_with("pci") {
            return Some(cur);
        }
        if !is_bdf(&pname) {
            return None;
        }
        cur = parent;
    }
}

/// The Intel root port above `dev`, or why there is none.
pub fn root_port_of(spec: &str, dev: &Path) -> Result<String, UsageError> {
    let top = top_of(dev).ok_or_else(|| {
        UsageError::new(
            "--device",
            format!("{spec}: {} is not below a PCI host bridge", dev.display()),
        )
    })?;
    let name = top
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if top == dev {
        if is_intel_bridge(&top) {
            return Ok(name);
        }
        return Err(UsageError::new(
            "--device",
            format!(
                "{} sits directly on the root bus: there is no PCIe root port above it whose DDIO could be set (an integrated device)",
                if spec == name { name.clone() } else { format!("{spec} ({name})") }
            ),
        ));
    }
    if !is_intel_bridge(&top) {
        let (v, c) = vendor_class(&top);
        return Err(UsageError::new(
            "--device",
            format!(
                "{spec} hangs off {name}, which is not an Intel PCIe root port (vendor {}, class {}; needs vendor 0x8086, class 0x0604)",
                v.map_or("unknown".into(), |v| format!("{v:#06x}")),
                c.map_or("unknown".into(), |c| format!("{c:#08x}"))
            ),
        ));
    }
    Ok(name)
}

/// Every Intel root port (an Intel bridge on a root bus) with at least one
/// device below it, with the devices below.
pub fn intel_root_ports(root: &HostRoot) -> Vec<(String, Vec<String>)> {
    let base = root.path("/sys/bus/pci/devices");
    let mut out = Vec::new();
    for name in dir_names(&base) {
        let Ok(dir) = fs::canonicalize(base.join(&name)) else {
            continue;
        };
        if top_of(&dir).as_deref() != Some(dir.as_path()) || !is_intel_bridge(&dir) {
            continue;
        }
        let below = devices_below(&dir);
        if !below.is_empty() {
            out.push((name, below));
        }
    }
    out
}

/// PCI functions anywhere below a bridge directory.
fn devices_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for n in dir_names(dir) {
        if is_bdf(&n) {
            out.push(n.clone());
            out.extend(devices_below(&dir.join(&n)));
        }
    }
    out
}

/// One logical CPU of each package (socket), lowest number first:
/// `(package, cpu)`. MSR 0xC8B is a package-scope register, so one write
/// per package is enough.
pub fn one_cpu_per_package(root: &HostRoot) -> Vec<(u32, usize)> {
    let base = root.path("/sys/devices/system/cpu");
    let mut out: Vec<(u32, usize)> = Vec::new();
    for n in dir_names(&base) {
        let Some(cpu) = n.strip_prefix("cpu").and_then(|c| c.parse::<usize>().ok()) else {
            continue;
        };
        let pkg = read_trim(&base.join(&n).join("topology/physical_package_id"))
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0);
        if !out.iter().any(|(p, _)| *p == pkg) {
            out.push((pkg, cpu));
        }
    }
    if out.is_empty() {
        out.push((0, 0));
    }
    out.sort();
    out
}

/// Ways of the last-level cache (the highest `level` under cpu0's cache
/// directory).
pub fn llc_ways(root: &HostRoot) -> Option<u32> {
    let base = root.path("/sys/devices/system/cpu/cpu0/cache");
    dir_names(&base)
        .into_iter()
        .filter(|n| n.starts_with("index"))
        .filter_map(|n| {
            let d = base.join(n);
            let level: u32 = read_trim(&d.join("level"))?.parse().ok()?;
            let kind = read_trim(&d.join("type")).unwrap_or_default();
            (kind != "Instruction").then_some((level, d))
        })
        .max_by_key(|(l, _)| *l)
        .and_then(|(_, d)| read_trim(&d.join("ways_of_associativity"))?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_and_allowlist() {
        let amd = CpuId::parse("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n");
        assert_eq!(amd.family, 26);
        assert_eq!(amd.model, 2);
        assert!(amd.ddio_generation().is_none());
        assert!(amd
            .refusal()
            .starts_with("not on this CPU: AuthenticAMD family 26 model 0x2 (AMD EPYC)"));
        let skx = CpuId::parse("vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) Gold 6140\n");
        assert_eq!(
            skx.ddio_generation(),
            Some("Skylake-SP / Cascade Lake-SP / Cooper Lake")
        );
        let client = CpuId { model: 0x9e, ..skx };
        assert!(client.ddio_generation().is_none());
    }

    #[test]
    fn names() {
        assert!(is_bdf("0000:17:00.0"));
        assert!(!is_bdf("17:00.0"));
        assert!(!is_bdf("0000:17:00:0"));
        assert_eq!(nvme_controller("nvme0n1").as_deref(), Some("nvme0"));
        assert_eq!(nvme_controller("ng12n3").as_deref(), Some("nvme12"));
        assert_eq!(nvme_controller("nvme1").as_deref(), Some("nvme1"));
        assert_eq!(nvme_controller("nvme0n1p1"), None);
        assert_eq!(nvme_controller("sda"), None);
    }
}
