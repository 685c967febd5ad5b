//! Register access behind two small traits, so the DDIO logic runs the same
//! on the hardware and on fixture files.
//!
//! The real implementations are plain positional reads and writes of files:
//! a root port's `/sys/bus/pci/devices/BDF/config` (the kernel turns a
//! one-byte `pwrite` at offset 0x180 into a one-byte config write; unprivileged
//! reads stop at byte 64) and `/dev/cpu/N/msr` (the `msr` driver reads or
//! writes the MSR whose number is the file offset, 8 bytes at a time). The
//! same code therefore works on a 4 KiB blob and a sparse file per CPU under
//! a test's [`HostRoot`].

use crate::HostRoot;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// One byte at a time of a PCI function's configuration space.
pub trait ConfigSpace {
    /// Reads the byte at `offset` of function `bdf` (`0000:17:00.0`).
    fn read_u8(&self, bdf: &str, offset: u64) -> io::Result<u8>;
    /// Writes the byte at `offset` of function `bdf`.
    fn write_u8(&self, bdf: &str, offset: u64, value: u8) -> io::Result<()>;
}

/// Model-specific registers of one CPU at a time.
pub trait MsrAccess {
    /// Reads MSR `msr` on logical CPU `cpu`.
    fn read(&self, cpu: usize, msr: u32) -> io::Result<u64>;
    /// Writes MSR `msr` on logical CPU `cpu`.
    fn write(&self, cpu: usize, msr: u32, value: u64) -> io::Result<()>;
    /// The device file of `cpu`, for messages.
    fn describe(&self, cpu: usize) -> String;
}

/// `ROOT/sys/bus/pci/devices/BDF/config`.
#[derive(Clone, Debug)]
pub struct SysfsConfig {
    root: HostRoot,
}

impl SysfsConfig {
    /// Config files under `root`.
    pub fn new(root: &HostRoot) -> Self {
        Self { root: root.clone() }
    }

    fn file(&self, bdf: &str) -> PathBuf {
        self.root
            .path(&format!("/sys/bus/pci/devices/{bdf}/config"))
    }
}

impl ConfigSpace for SysfsConfig {
    fn read_u8(&self, bdf: &str, offset: u64) -> io::Result<u8> {
        let mut b = [0u8; 1];
        File::open(self.file(bdf))?.read_exact_at(&mut b, offset)?;
        Ok(b[0])
    }

    fn write_u8(&self, bdf: &str, offset: u64, value: u8) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(self.file(bdf))?;
        f.write_all_at(&[value], offset)?;
        Ok(())
    }
}

/// `ROOT/dev/cpu/N/msr`.
#[derive(Clone, Debug)]
pub struct DevMsr {
    root: HostRoot,
}

impl DevMsr {
    /// MSR device files under `root`.
    pub fn new(root: &HostRoot) -> Self {
        Self { root: root.clone() }
    }

    fn file(&self, cpu: usize) -> PathBuf {
        self.root.path(&format!("/dev/cpu/{cpu}/msr"))
    }
}

impl MsrAccess for DevMsr {
    fn read(&self, cpu: usize, msr: u32) -> io::Result<u64> {
        let mut b = [0u8; 8];
        File::open(self.file(cpu))?.read_exact_at(&mut b, u64::from(msr))?;
        Ok(u64::from_le_bytes(b))
    }

    fn write(&self, cpu: usize, msr: u32, value: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(self.file(cpu))?;
        f.write_all_at(&value.to_le_bytes(), u64::from(msr))?;
        Ok(())
    }

    fn describe(&self, cpu: usize) -> String {
        self.file(cpu).display().to_string()
    }
}

/// Both register kinds of one host.
pub struct Registers {
    /// PCI configuration space.
    pub config: Box<dyn ConfigSpace>,
    /// Model-specific registers.
    pub msr: Box<dyn MsrAccess>,
}

impl Registers {
    /// The files under `root` (the hardware itself when `root` is `/`).
    pub fn files(root: &HostRoot) -> Self {
        Self {
            config: Box::new(SysfsConfig::new(root)),
            msr: Box::new(DevMsr::new(root)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_bytes_and_msrs_round_trip_through_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::at(dir.path());
        let dev = root.path("/sys/bus/pci/devices/0000:00:01.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("config"), vec![0u8; 4096]).unwrap();
        let c = SysfsConfig::new(&root);
        c.write_u8("0000:00:01.0", 0x180, 0x91).unwrap();
        assert_eq!(c.read_u8("0000:00:01.0", 0x180).unwrap(), 0x91);
        let blob = std::fs::read(dev.join("config")).unwrap();
        assert_eq!(blob.len(), 4096, "a one-byte write must not grow the blob");
        assert_eq!(blob[0x180], 0x91);
        assert_eq!(blob.iter().filter(|b| **b != 0).count(), 1);

        let cpu = root.path("/dev/cpu/1");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("msr"), vec![0u8; 0x1000]).unwrap();
        let m = DevMsr::new(&root);
        m.write(1, 0xc8b, 0x7f0).unwrap();
        assert_eq!(m.read(1, 0xc8b).unwrap(), 0x7f0);
        let raw = std::fs::read(cpu.join("msr")).unwrap();
        assert_eq!(&raw[0xc8b..0xc8b + 8], &0x7f0u64.to_le_bytes());
    }
}
