//! What the result says about a GPU: the driver's name and PCI address, the
//! link the device trained to and its NUMA node from sysfs.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// One GPU of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    /// Index among the driver's devices (`gpu:N`).
    pub index: u32,
    /// Name from the driver (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// PCI address, sysfs spelling (`0000:3b:00.0`).
    pub pci_address: String,
    /// Device memory, bytes.
    pub memory_bytes: u64,
    /// NUMA node of the PCI device (None: the platform does not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// Current link speed as sysfs prints it (`32.0 GT/s PCIe`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_speed: Option<String>,
    /// PCIe generation of the current link speed (5 for 32 GT/s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_generation: Option<u32>,
    /// Current link width, lanes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_width: Option<u32>,
    /// Maximum link width the device supports, lanes (a GPU trained to
    /// fewer lanes than this moves less than it could).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_link_width: Option<u32>,
}

/// The sysfs spelling of a PCI address the driver printed: lower case, a
/// 4-digit domain (`cuDeviceGetPCIBusId` gives `0000:3B:00.0`, NVML an
/// 8-digit domain). None when it is not an address.
pub fn normalize_pci_address(text: &str) -> Option<String> {
    let text = text.trim();
    let (domain, rest) = text.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |s: &str, max: u32| u32::from_str_radix(s, 16).ok().filter(|v| *v <= max);
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        hex(domain, 0xffff)?,
        hex(bus, 0xff)?,
        hex(dev, 0x1f)?,
        hex(func, 7)?
    ))
}

/// PCIe generation of a `current_link_speed` text (`16.0 GT/s PCIe`).
pub fn link_generation(speed: &str) -> Option<u32> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    Some(match gts {
        g if (g - 2.5).abs() < 0.1 => 1,
        g if (g - 5.0).abs() < 0.1 => 2,
        g if (g - 8.0).abs() < 0.1 => 3,
        g if (g - 16.0).abs() < 0.1 => 4,
        g if (g - 32.0).abs() < 0.1 => 5,
        g if (g - 64.0).abs() < 0.1 => 6,
        g if (g - 128.0).abs() < 0.1 => 7,
        _ => return None,
    })
}

fn read(p: &Path) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty() && s != "Unknown").then(|| s.to_string())
}

/// Fills the link and NUMA facts of `f` from `SYS/bus/pci/devices/ADDR`
/// (`sys` is `/sys`, or a test's fixture).
pub fn read_pci_link(sys: &Path, f: &mut GpuFacts) {
    let d = sys.join("bus/pci/devices").join(&f.pci_address);
    f.numa_node = read(&d.join("numa_node"))
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    f.link_speed = read(&d.join("current_link_speed"));
    f.link_generation = f.link_speed.as_deref().and_then(link_generation);
    f.link_width = read(&d.join("current_link_width")).and_then(|s| s.parse().ok());
    f.max_link_width = read(&d.join("max_link_width")).and_then(|s| s.parse().ok());
}

/// NUMA node of a CPU (`SYS/devices/system/cpu/cpuN/nodeM`); None on a
/// kernel without NUMA.
pub fn cpu_node(sys: &Path, cpu: usize) -> Option<u32> {
    std::fs::read_dir(sys.join(format!("devices/system/cpu/cpu{cpu}")))
        .ok()?
        .filter_map(Result::ok)
        .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_take_the_sysfs_spelling() {
        assert_eq!(
            normalize_pci_address("0000:3B:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(
            normalize_pci_address("00000000:C1:00.0").as_deref(),
            Some("0000:c1:00.0")
        );
        assert_eq!(normalize_pci_address("3B:00.0"), None);
        assert_eq!(normalize_pci_address("0000:3B:00.9"), None);
        assert_eq!(normalize_pci_address(""), None);
    }

    #[test]
    fn link_speeds_name_their_generation() {
        assert_eq!(link_generation("32.0 GT/s PCIe"), Some(5));
        assert_eq!(link_generation("16.0 GT/s PCIe"), Some(4));
        assert_eq!(link_generation("8.0 GT/s PCIe"), Some(3));
        assert_eq!(link_generation("2.5 GT/s PCIe"), Some(1));
        assert_eq!(link_generation("Unknown"), None);
    }

    #[test]
    fn link_and_node_come_from_the_devices_sysfs_directory() {
        let sys = tempfile::tempdir().unwrap();
        let d = sys.path().join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("numa_node"), "1\n").unwrap();
        std::fs::write(d.join("current_link_speed"), "16.0 GT/s PCIe\n").unwrap();
        std::fs::write(d.join("current_link_width"), "8\n").unwrap();
        std::fs::write(d.join("max_link_width"), "16\n").unwrap();
        let mut f = GpuFacts {
            pci_address: "0000:3b:00.0".into(),
            ..GpuFacts::default()
        };
        read_pci_link(sys.path(), &mut f);
        assert_eq!(f.numa_node, Some(1));
        assert_eq!(f.link_generation, Some(4));
        assert_eq!(f.link_width, Some(8));
        assert_eq!(f.max_link_width, Some(16));
        // A platform without NUMA information says -1: no node.
        std::fs::write(d.join("numa_node"), "-1\n").unwrap();
        read_pci_link(sys.path(), &mut f);
        assert_eq!(f.numa_node, None);
        let cpu = sys.path().join("devices/system/cpu/cpu3/node1");
        std::fs::create_dir_all(cpu).unwrap();
        assert_eq!(cpu_node(sys.path(), 3), Some(1));
        assert_eq!(cpu_node(sys.path(), 4), None);
    }
}
