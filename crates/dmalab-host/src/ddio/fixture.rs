//! A fake Intel host for tests: `/proc/cpuinfo` of a Skylake-SP, CPUs in
//! packages, an 11-way LLC, one `/dev/cpu/N/msr` file per CPU and a PCI tree
//! whose NVMe drive sits two bridges (a switch) below an Intel root port.
//! Config spaces are 4 KiB blobs with Intel's vendor id and the bridge class
//! at their real offsets; MSR files hold MSR 0xC8B at byte 0xC8B.

use super::{MSR_IIO_LLC_WAYS, PERFCTRLSTS_0};
use crate::HostRoot;
use std::fs;
use std::io;
use std::path::Path;

/// The root port the fixture's NVMe drive hangs off.
pub const NVME_ROOT_PORT: &str = "0000:16:00.0";
/// The fixture's NVMe drive (two bridges below [`NVME_ROOT_PORT`]).
pub const NVME_DEVICE: &str = "0000:19:00.0";
/// The root port the fixture's NIC `eth0` hangs off.
pub const NIC_ROOT_PORT: &str = "0000:3a:00.0";
/// The NIC.
pub const NIC_DEVICE: &str = "0000:3b:00.0";
/// `perfctrlsts_0` as the fixture starts (bit 7 set: DDIO on).
pub const PERFCTRL_START: u8 = 0x91;
/// MSR 0xC8B as the fixture starts (2 of 11 ways).
pub const WAYS_START: u64 = 0x600;

fn write(p: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d)?;
    }
    fs::write(p, contents)
}

/// A 4 KiB config space with vendor, device and class at their offsets.
pub fn config_blob(vendor: u16, device: u16, class: u32) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    b[0..2].copy_from_slice(&vendor.to_le_bytes());
    b[2..4].copy_from_slice(&device.to_le_bytes());
    b[9] = (class & 0xff) as u8;
    b[10] = ((class >> 8) & 0xff) as u8;
    b[11] = ((class >> 16) & 0xff) as u8;
    b
}

fn pci(root: &HostRoot, rel: &str, vendor: u16, device: u16, class: u32) -> io::Result<()> {
    let dir = root.path(&format!("/sys/devices/{rel}"));
    fs::create_dir_all(&dir)?;
    write(&dir.join("vendor"), format!("{vendor:#06x}\n"))?;
    write(&dir.join("device"), format!("{device:#06x}\n"))?;
    write(&dir.join("class"), format!("{class:#08x}\n"))?;
    let mut blob = config_blob(vendor, device, class);
    if class >> 8 == 0x0604 && vendor == 0x8086 {
        blob[PERFCTRLSTS_0 as usize] = PERFCTRL_START;
    }
    write(&dir.join("config"), blob)?;
    let bdf = rel.rsplit('/').next().unwrap_or(rel);
    let link = root.path(&format!("/sys/bus/pci/devices/{bdf}"));
    fs::create_dir_all(link.parent().unwrap_or(Path::new(".")))?;
    std::os::unix::fs::symlink(format!("../../../devices/{rel}"), link)
}

/// Builds an Intel host under `dir` with `packages` packages of
/// `cpus_per_package` CPUs.
pub fn intel_host(dir: &Path, packages: u32, cpus_per_package: usize) -> io::Result<HostRoot> {
    let root = HostRoot::at(dir);
    write(
        &root.path("/proc/cpuinfo"),
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) Gold 6140 CPU @ 2.30GHz\n",
    )?;
    let mut cpu = 0usize;
    for pkg in 0..packages {
        for _ in 0..cpus_per_package {
            let c = root.path(&format!("/sys/devices/system/cpu/cpu{cpu}"));
            write(&c.join("topology/physical_package_id"), format!("{pkg}\n"))?;
            let mut msr = vec![0u8; 0x1000];
            let at = MSR_IIO_LLC_WAYS as usize;
            msr[at..at + 8].copy_from_slice(&WAYS_START.to_le_bytes());
            write(&root.path(&format!("/dev/cpu/{cpu}/msr")), msr)?;
            cpu += 1;
        }
    }
    let l3 = root.path("/sys/devices/system/cpu/cpu0/cache/index3");
    write(&l3.join("level"), "3\n")?;
    write(&l3.join("type"), "Unified\n")?;
    write(&l3.join("ways_of_associativity"), "11\n")?;
    let l1 = root.path("/sys/devices/system/cpu/cpu0/cache/index0");
    write(&l1.join("level"), "1\n")?;
    write(&l1.join("type"), "Data\n")?;
    write(&l1.join("ways_of_associativity"), "8\n")?;
    // Host bridge on the root bus (Intel, but not a PCI-to-PCI bridge).
    pci(&root, "pci0000:00/0000:00:00.0", 0x8086, 0x2020, 0x060000)?;
    // NVMe behind a switch (upstream 17:00.0, downstream 18:01.0).
    pci(&root, "pci0000:16/0000:16:00.0", 0x8086, 0x2030, 0x060400)?;
    pci(
        &root,
        "pci0000:16/0000:16:00.0/0000:17:00.0",
        0x10b5,
        0x8747,
        0x060400,
    )?;
    pci(
        &root,
        "pci0000:16/0000:16:00.0/0000:17:00.0/0000:18:01.0",
        0x10b5,
        0x8747,
        0x060400,
    )?;
    pci(
        &root,
        "pci0000:16/0000:16:00.0/0000:17:00.0/0000:18:01.0/0000:19:00.0",
        0x144d,
        0xa808,
        0x010802,
    )?;
    // A NIC directly below a second root port.
    pci(&root, "pci0000:3a/0000:3a:00.0", 0x8086, 0x2030, 0x060400)?;
    pci(
        &root,
        "pci0000:3a/0000:3a:00.0/0000:3b:00.0",
        0x8086,
        0x1592,
        0x020000,
    )?;
    // An Intel root port with nothing below it (left alone).
    pci(&root, "pci0000:5d/0000:5d:02.0", 0x8086, 0x2032, 0x060400)?;
    let class_link = |class: &str, rel: &str| -> io::Result<()> {
        let l = root.path(class);
        fs::create_dir_all(&l)?;
        std::os::unix::fs::symlink(root.path(&format!("/sys/devices/{rel}")), l.join("device"))
    };
    class_link(
        "/sys/class/nvme/nvme0",
        "pci0000:16/0000:16:00.0/0000:17:00.0/0000:18:01.0/0000:19:00.0",
    )?;
    class_link(
        "/sys/class/net/eth0",
        "pci0000:3a/0000:3a:00.0/0000:3b:00.0",
    )?;
    Ok(root)
}

/// `perfctrlsts_0` of a fixture root port, read straight from its blob.
pub fn perfctrl(root: &HostRoot, bdf: &str) -> io::Result<u8> {
    let blob = fs::read(root.path(&format!("/sys/bus/pci/devices/{bdf}/config")))?;
    Ok(blob[PERFCTRLSTS_0 as usize])
}

/// MSR 0xC8B of a fixture CPU, read straight from its file.
pub fn ways_msr(root: &HostRoot, cpu: usize) -> io::Result<u64> {
    let raw = fs::read(root.path(&format!("/dev/cpu/{cpu}/msr")))?;
    let at = MSR_IIO_LLC_WAYS as usize;
    let mut b = [0u8; 8];
    b.copy_from_slice(&raw[at..at + 8]);
    Ok(u64::from_le_bytes(b))
}
