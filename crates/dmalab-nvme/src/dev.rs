//! One NVMe namespace opened for passthrough: its generic character device
//! (`/dev/ngXnY`) or its block device (`/dev/nvmeXnY`), the synchronous
//! `NVME_IOCTL_ADMIN_CMD` / `NVME_IOCTL_IO_CMD` paths, Identify, Format NVM,
//! and the [`NvmeInfo`] summary `dmalab info nvme` prints.

use crate::cmd::{cns, PassthruCmd, IDENTIFY_LEN, MAX_NLB_BLOCKS};
use crate::identify::{IdController, IdNamespace};
use crate::Error;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `_IOWR('N', nr, 72-byte struct)`.
const fn iowr_n(nr: u32) -> u32 {
    (3 << 30) | (72 << 16) | ((b'N' as u32) << 8) | nr
}

/// `NVME_IOCTL_ID`: `_IO('N', 0x40)`, returns the namespace id.
pub const NVME_IOCTL_ID: u32 = (b'N' as u32) << 8 | 0x40;
/// `NVME_IOCTL_ADMIN_CMD`: `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
pub const NVME_IOCTL_ADMIN_CMD: u32 = iowr_n(0x41);
/// `NVME_IOCTL_IO_CMD`: `_IOWR('N', 0x43, struct nvme_passthru_cmd)`.
pub const NVME_IOCTL_IO_CMD: u32 = iowr_n(0x43);
/// `NVME_URING_CMD_IO`: `_IOWR('N', 0x80, struct nvme_uring_cmd)`, the
/// `cmd_op` of an io_uring passthrough I/O command.
pub const NVME_URING_CMD_IO: u32 = iowr_n(0x80);

/// A 4 KiB-aligned page for Identify data.
#[repr(C, align(4096))]
struct Page([u8; IDENTIFY_LEN]);

/// The kernel names of one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceNames {
    /// Generic character device (`/dev/ng0n1`), when it exists.
    pub generic: Option<PathBuf>,
    /// Block device (`/dev/nvme0n1`), when it exists.
    pub block: Option<PathBuf>,
}

/// Maps `ngXnY` <-> `nvmeXnY` by name (the kernel names both after the same
/// controller instance and namespace). Returns None for a name that is
/// neither.
pub fn namespace_names(path: &Path) -> Option<NamespaceNames> {
    let canon = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = canon.file_name()?.to_str()?;
    let rest = if let Some(r) = name.strip_prefix("ng") {
        r
    } else {
        name.strip_prefix("nvme")?
    };
    // rest = "XnY": digits, 'n', digits (no partitions: "0n1p1" is refused).
    let (ctrl, ns) = rest.split_once('n')?;
    if ctrl.is_empty()
        || ns.is_empty()
        || !ctrl.bytes().all(|c| c.is_ascii_digit())
        || !ns.bytes().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let g = PathBuf::from(format!("/dev/ng{rest}"));
    let b = PathBuf::from(format!("/dev/nvme{rest}"));
    Some(NamespaceNames {
        generic: g.exists().then_some(g),
        block: b.exists().then_some(b),
    })
}

/// An NVMe namespace opened for passthrough.
#[derive(Debug)]
pub struct NvmeDevice {
    file: File,
    path: PathBuf,
    nsid: u32,
    is_generic: bool,
}

/// The sysfs device directory of a device node (`/sys/dev/block/MAJ:MIN`
/// or `/sys/dev/char/MAJ:MIN` resolved), when sysfs has it. An NVMe
/// namespace's lies under its controller's `nvme` class directory, e.g.
/// `/sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1`, or under its
/// subsystem's with native multipath.
fn sysfs_node(meta: &fs::Metadata) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let kind = if meta.file_type().is_block_device() {
        "block"
    } else {
        "char"
    };
    let link = format!(
        "/sys/dev/{kind}/{}:{}",
        libc::major(rdev),
        libc::minor(rdev)
    );
    fs::canonicalize(link).ok()
}

impl NvmeDevice {
    /// Opens an NVMe namespace (`/dev/ngXnY` or `/dev/nvmeXnY`); `writable`
    /// opens it read-write (newer kernels require that for Write commands).
    pub fn open(path: &Path, writable: bool) -> Result<Self, Error> {
        let meta = fs::metadata(path).map_err(|e| Error::io(format!("{}", path.display()), e))?;
        let ft = meta.file_type();
        if !ft.is_char_device() && !ft.is_block_device() {
            return Err(Error::NotNvme {
                path: path.display().to_string(),
                why: "not a device node; name an NVMe namespace such as /dev/ng0n1 or /dev/nvme0n1"
                    .into(),
            });
        }
        if let Some(sys) = sysfs_node(&meta) {
            // Under a controller (`.../nvme/nvme0/`) or, with native
            // multipath, a subsystem (`.../nvme-subsystem/nvme-subsys0/`).
            if !sys
                .components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with("nvme"))
            {
                let name = sys.file_name().map_or_else(
                    || sys.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                return Err(Error::NotNvme {
                    path: path.display().to_string(),
                    why: format!(
                        "it is device {name} ({}), not an NVMe namespace; name one such as /dev/ng0n1 or /dev/nvme0n1 (see `nvme list`)",
                        sys.display()
                    ),
                });
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
        // SAFETY: NVME_IOCTL_ID takes no argument; the fd is open.
        let nsid = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ID as _) };
        if nsid <= 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::NotNvme {
                path: path.display().to_string(),
                why: format!("NVME_IOCTL_ID failed ({e}): not an NVMe namespace"),
            });
        }
        Ok(Self {
            file,
            path: path.to_path_buf(),
            nsid: nsid as u32,
            is_generic: ft.is_char_device(),
        })
    }

    /// The namespace id.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True for the generic character device (`/dev/ngXnY`), which is what
    /// io_uring passthrough needs.
    pub fn is_generic(&self) -> bool {
        self.is_generic
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    fn passthru(&self, req: u32, cmd: &mut PassthruCmd, what: &str) -> Result<u32, Error> {
        // SAFETY: cmd is a valid nvme_passthru_cmd; the caller guarantees that
        // cmd.addr/data_len describe memory it owns for the call's duration
        // (the ioctl is synchronous).
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), req as _, cmd as *mut PassthruCmd) };
        if rc < 0 {
            return Err(Error::io(
                format!("{what} on {}", self.path.display()),
                std::io::Error::last_os_error(),
            ));
        }
        if rc > 0 {
            return Err(Error::Nvme {
                what: format!("{what} on {}", self.path.display()),
                status: rc as u32,
            });
        }
        Ok(cmd.result)
    }

    /// Sends an admin command synchronously; returns completion dword 0.
    ///
    /// # Safety
    /// `cmd.addr` and `cmd.data_len` must describe memory valid for the
    /// transfer (written by the device for data-in commands).
    pub unsafe fn admin(&self, cmd: &mut PassthruCmd) -> Result<u32, Error> {
        self.passthru(NVME_IOCTL_ADMIN_CMD, cmd, "NVME_IOCTL_ADMIN_CMD")
    }

    /// Sends an I/O command synchronously; returns completion dword 0.
    ///
    /// # Safety
    /// `cmd.addr` and `cmd.data_len` must describe memory valid for the
    /// transfer (written by the device for a Read).
    pub unsafe fn io(&self, cmd: &mut PassthruCmd) -> Result<u32, Error> {
        self.passthru(NVME_IOCTL_IO_CMD, cmd, "NVME_IOCTL_IO_CMD")
    }

    fn identify(&self, cns: u32, nsid: u32) -> Result<Box<Page>, Error> {
        let mut page = Box::new(Page([0u8; IDENTIFY_LEN]));
        let mut cmd = PassthruCmd::identify(cns, nsid, page.0.as_mut_ptr() as u64);
        // SAFETY: the page is 4096 bytes, owned here, alive for the call.
        unsafe { self.admin(&mut cmd)? };
        Ok(page)
    }

    /// Identify Controller.
    pub fn identify_controller(&self) -> Result<IdController, Error> {
        IdController::parse(&self.identify(cns::CONTROLLER, 0)?.0)
    }

    /// Identify Namespace of this namespace.
    pub fn identify_namespace(&self) -> Result<IdNamespace, Error> {
        IdNamespace::parse(&self.identify(cns::NAMESPACE, self.nsid)?.0)
    }

    /// Format NVM of this namespace with LBA format `lbaf`, no secure erase.
    /// Destroys every block of the namespace.
    pub fn format_nvm(&self, lbaf: u8) -> Result<(), Error> {
        let mut cmd = PassthruCmd::format_nvm(self.nsid, lbaf);
        // SAFETY: Format NVM moves no data.
        unsafe { self.admin(&mut cmd)? };
        Ok(())
    }

    /// Identify both and summarise.
    pub fn info(&self) -> Result<NvmeInfo, Error> {
        let controller = self.identify_controller()?;
        let namespace = self.identify_namespace()?;
        let lba_size = namespace.lba_size().ok_or_else(|| Error::NotNvme {
            path: self.path.display().to_string(),
            why: "the namespace's LBA format in use has no valid block size".into(),
        })?;
        let names = namespace_names(&self.path).unwrap_or_default();
        let max_hw = names
            .block
            .as_ref()
            .and_then(|b| b.file_name().map(|n| n.to_string_lossy().into_owned()))
            .and_then(|n| {
                fs::read_to_string(format!("/sys/block/{n}/queue/max_hw_sectors_kb")).ok()
            })
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|kb| kb * 1024);
        let mdts = controller.mdts_bytes();
        let nlb_limit = u64::from(MAX_NLB_BLOCKS) * lba_size;
        let max_transfer = [mdts, max_hw, Some(nlb_limit)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(nlb_limit);
        Ok(NvmeInfo {
            path: self.path.display().to_string(),
            generic_device: names.generic.map(|p| p.display().to_string()),
            block_device: names.block.map(|p| p.display().to_string()),
            nsid: self.nsid,
            lba_size_bytes: lba_size,
            capacity_bytes: namespace.nsze.saturating_mul(lba_size),
            mdts_bytes: mdts,
            max_hw_transfer_bytes: max_hw,
            max_transfer_bytes: max_transfer,
            max_blocks_per_command: (max_transfer / lba_size) as u32,
            controller,
            namespace,
        })
    }
}

/// What Identify says about a namespace and its controller, and the transfer
/// limits that follow (the `dmalab info nvme` view and the load result's
/// NVMe header).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmeInfo {
    /// The path the user named.
    pub path: String,
    /// The namespace's generic character device (`/dev/ngXnY`).
    pub generic_device: Option<String>,
    /// The namespace's block device (`/dev/nvmeXnY`).
    pub block_device: Option<String>,
    /// Namespace id.
    pub nsid: u32,
    /// Logical block size in use, bytes.
    pub lba_size_bytes: u64,
    /// Namespace size (NSZE x block size), bytes.
    pub capacity_bytes: u64,
    /// The controller's maximum data transfer size, bytes (None: no limit);
    /// assumes a 4 KiB minimum memory page size.
    pub mdts_bytes: Option<u64>,
    /// The kernel's limit for one request (`max_hw_sectors_kb`), bytes,
    /// when the block device's sysfs entry is readable.
    pub max_hw_transfer_bytes: Option<u64>,
    /// Largest transfer of one command: the least of MDTS, the kernel's
    /// limit and NLB's 65536 blocks, bytes.
    pub max_transfer_bytes: u64,
    /// `max_transfer_bytes` in logical blocks.
    pub max_blocks_per_command: u32,
    /// Identify Controller.
    pub controller: IdController,
    /// Identify Namespace.
    pub namespace: IdNamespace,
}

fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl NvmeInfo {
    /// One line naming the namespace, for the head of a load summary.
    pub fn summary_line(&self) -> String {
        let f = self.namespace.current_format();
        format!(
            "nvme: {} (serial {}, firmware {}), nsid {}, LBA format {} = {} B blocks ({}), max {} B per command (MDTS)\n",
            self.controller.model,
            self.controller.serial,
            self.controller.firmware,
            self.nsid,
            f.map_or(0, |f| f.index),
            self.lba_size_bytes,
            f.map_or("?", |f| f.relative_performance.label()),
            self.max_transfer_bytes,
        )
    }

    /// The human view (`dmalab info nvme`, and the head of a load summary).
    pub fn render_text(&self) -> String {
        let c = &self.controller;
        let mut s = String::new();
        let mut line = |k: &str, v: String| s.push_str(&format!("{k:<22}{v}\n"));
        line("device:", self.path.clone());
        if let Some(g) = &self.generic_device {
            line("generic device:", g.clone());
        }
        if let Some(b) = &self.block_device {
            line("block device:", b.clone());
        }
        line("model:", c.model.clone());
        line("serial:", c.serial.clone());
        line("firmware:", c.firmware.clone());
        line("nvme version:", c.version.clone());
        line(
            "vendor id:",
            format!("{:#06x} (subsystem {:#06x})", c.vid, c.ssvid),
        );
        line(
            "mdts:",
            match self.mdts_bytes {
                Some(b) => format!("{} ({}, field {})", b, fmt_bytes(b), c.mdts),
                None => "no limit (field 0)".into(),
            },
        );
        if let Some(h) = self.max_hw_transfer_bytes {
            line("kernel max transfer:", format!("{h} ({})", fmt_bytes(h)));
        }
        line(
            "max per command:",
            format!(
                "{} bytes = {} blocks",
                self.max_transfer_bytes, self.max_blocks_per_command
            ),
        );
        line(
            "volatile write cache:",
            if c.vwc & 1 == 1 { "present" } else { "absent" }.into(),
        );
        line("namespace id:", self.nsid.to_string());
        line(
            "size:",
            format!(
                "{} blocks = {} bytes ({})",
                self.namespace.nsze,
                self.capacity_bytes,
                fmt_bytes(self.capacity_bytes)
            ),
        );
        line(
            "logical block size:",
            format!("{} bytes", self.lba_size_bytes),
        );
        s.push_str("LBA formats:\n");
        for f in &self.namespace.lba_formats {
            s.push_str(&format!(
                "  LBA Format {:2} : Metadata Size: {:<3} bytes - Data Size: {:<5} bytes - Relative Performance: {:#x} {}{}\n",
                f.index,
                f.metadata_bytes,
                f.data_size_bytes,
                f.relative_performance.bits(),
                f.relative_performance.label(),
                if f.in_use { " (in use)" } else { "" }
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_uapi() {
        assert_eq!(NVME_IOCTL_ID, 0x4e40);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xc048_4e41);
        assert_eq!(NVME_IOCTL_IO_CMD, 0xc048_4e43);
        assert_eq!(NVME_URING_CMD_IO, 0xc048_4e80);
    }

    #[test]
    fn refuses_non_nvme_names() {
        assert!(namespace_names(Path::new("/dev/sda")).is_none());
        assert!(namespace_names(Path::new("/dev/nvme0n1p1")).is_none());
        assert!(namespace_names(Path::new("/dev/nvme0")).is_none());
        assert!(namespace_names(Path::new("/dev/ng0n1")).is_some());
    }

    #[test]
    fn regular_file_is_not_nvme() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = NvmeDevice::open(f.path(), false).unwrap_err();
        assert!(matches!(e, Error::NotNvme { .. }), "{e}");
    }

    #[test]
    fn bytes_format() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(512 * 1024), "512.0 KiB");
    }
}
