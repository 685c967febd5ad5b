//! The target: a scratch file, a file dmalab creates, an existing file, a
//! block device, or (for the nvme engine) an NVMe generic character device.
//!
//! A file dmalab creates is first filled with written data: a sparse or
//! fallocated file is read back as zeros by the kernel with no device I/O at
//! all, which would make storage reads a memset. It is removed afterwards
//! (on drop, also after an error or an interrupt) unless `keep`.

use dmalab_core::UsageError;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Errors preparing a target.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The user's input is at fault.
    #[error("{0}")]
    Usage(#[from] UsageError),
    /// A system call failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// OS error.
        cause: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TargetError {
    let what = what.into();
    move |cause| TargetError::Io { what, cause }
}

/// What kind of target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A regular file.
    File,
    /// A block device.
    Block,
    /// A character device (NVMe generic).
    Char,
}

impl TargetKind {
    /// `file`, `block`, `char`.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::File => "file",
            TargetKind::Block => "block",
            TargetKind::Char => "char",
        }
    }
}

/// A target ready for the run; removes what it created on drop.
#[derive(Debug)]
pub struct PreparedTarget {
    /// The path the engines open.
    pub path: PathBuf,
    /// Its kind.
    pub kind: TargetKind,
    /// True when dmalab created it in this run.
    pub created: bool,
    /// Size, bytes.
    pub size_bytes: u64,
    /// Logical block size of the device holding it, bytes.
    pub logical_block_size: u64,
    keep: bool,
    dir: Option<tempfile::TempDir>,
}

impl PreparedTarget {
    /// Keeps a created file (and its directory) after the run.
    pub fn keep(&mut self) {
        self.keep = true;
        if self.created {
            dmalab_core::ledger::forget_file(&self.path);
        }
        if let Some(d) = self.dir.take() {
            dmalab_core::ledger::forget_dir(d.path());
            let _ = d.keep();
        }
    }
}

impl Drop for PreparedTarget {
    fn drop(&mut self) {
        if self.created && !self.keep {
            let _ = fs::remove_file(&self.path);
            dmalab_core::ledger::forget_file(&self.path);
        }
        // A TempDir removes itself (unless kept).
        if let Some(d) = self.dir.take() {
            let p = d.path().to_path_buf();
            drop(d);
            dmalab_core::ledger::forget_dir(&p);
        }
    }
}

/// A scratch file of `size` bytes in a new temporary directory.
pub fn scratch(size: u64) -> Result<PreparedTarget, TargetError> {
    let dir = tempfile::Builder::new()
        .prefix("dmalab-load-")
        .tempdir()
        .map_err(io("create a temporary directory for the scratch file"))?;
    // In the ledger, so `dmalab cleanup` removes them after a kill -9.
    dmalab_core::ledger::add_dir(dir.path());
    let path = dir.path().join("scratch.dat");
    let mut t = match create(&path, size, "--target") {
        Ok(t) => t,
        Err(e) => {
            let p = dir.path().to_path_buf();
            drop(dir);
            dmalab_core::ledger::forget_dir(&p);
            return Err(e);
        }
    };
    t.dir = Some(dir);
    Ok(t)
}

/// Creates `path` with `size` bytes of written data. `option` names the
/// flag for errors.
pub fn create(path: &Path, size: u64, option: &str) -> Result<PreparedTarget, TargetError> {
    // Recorded before it exists; create_new makes sure it is ours.
    dmalab_core::ledger::add_file(path);
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            dmalab_core::ledger::forget_file(path);
            UsageError::new(option, format!("cannot create {}: {e}", path.display()))
        })?;
    let mut t = PreparedTarget {
        path: path.to_path_buf(),
        kind: TargetKind::File,
        created: true,
        size_bytes: size,
        logical_block_size: 512,
        keep: false,
        dir: None,
    };
    // From here on, dropping `t` removes the file.
    check_direct(path, option)?;
    fill(f, size).map_err(io(format!("fill {}", path.display())))?;
    t.logical_block_size = logical_block_size(path);
    Ok(t)
}

/// An existing file or device.
pub fn existing(path: &Path, nvme: bool) -> Result<PreparedTarget, TargetError> {
    let meta = fs::metadata(path)
        .map_err(|e| UsageError::new("--target", format!("cannot use {}: {e}", path.display())))?;
    let ft = meta.file_type();
    let kind = if ft.is_file() {
        TargetKind::File
    } else if ft.is_block_device() {
        TargetKind::Block
    } else if ft.is_char_device() {
        if !nvme {
            return Err(UsageError::new(
                "--target",
                format!("{} is a character device; only --engine nvme takes one (an NVMe generic device /dev/ngXnY)", path.display()),
            )
            .into());
        }
        TargetKind::Char
    } else {
        return Err(UsageError::new(
            "--target",
            format!(
                "{} is neither a regular file nor a device; name a file or a block device",
                path.display()
            ),
        )
        .into());
    };
    if nvme && kind != TargetKind::Char {
        return Err(UsageError::new(
            "--target",
            format!(
                "--engine nvme needs an NVMe generic character device (/dev/ngXnY), not {}",
                path.display()
            ),
        )
        .into());
    }
    let (size, lbs) = match kind {
        TargetKind::File => (meta.len(), logical_block_size(path)),
        TargetKind::Block => {
            let f = File::open(path).map_err(io(format!("open {}", path.display())))?;
            let mut size = 0u64;
            // SAFETY: BLKGETSIZE64 writes one u64 into our variable.
            unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &mut size) };
            (size, logical_block_size(path))
        }
        TargetKind::Char => {
            let block = dmalab_core::safety::block_device_for_nvme_generic(path);
            let d = block
                .as_deref()
                .and_then(dmalab_core::host::DeviceInfo::describe);
            (
                d.as_ref().map_or(0, |d| d.size_bytes),
                d.map_or(512, |d| d.logical_block_size.max(512)),
            )
        }
    };
    if kind != TargetKind::Char {
        check_direct(path, "--target")?;
    }
    Ok(PreparedTarget {
        path: path.to_path_buf(),
        kind,
        created: false,
        size_bytes: size,
        logical_block_size: lbs,
        keep: true,
        dir: None,
    })
}

/// `_IOR(0x12, 114, size_t)`.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn logical_block_size(path: &Path) -> u64 {
    dmalab_core::host::DeviceInfo::describe(path)
        .map(|d| d.logical_block_size)
        .filter(|&b| b >= 512)
        .unwrap_or(512)
}

/// Opens with O_DIRECT to see that the filesystem supports it.
fn check_direct(path: &Path, option: &str) -> Result<(), TargetError> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let fs = dmalab_core::host::filesystem_type(path).unwrap_or_else(|| "unknown".into());
            Err(UsageError::new(
                option,
                format!(
                    "{} is on a {fs} filesystem, which does not support O_DIRECT; put the target on a disk-backed filesystem (ext4, xfs, btrfs) or a block device",
                    path.display()
                ),
            )
            .into())
        }
        Err(e) => Err(io(format!("open {} with O_DIRECT", path.display()))(e)),
    }
}

/// Writes `size` bytes of non-zero data (each 4 KiB block starts with its
/// own offset, the rest is 0xA5), syncs, and drops the page cache copy.
fn fill(mut f: File, size: u64) -> std::io::Result<()> {
    const CHUNK: usize = 8 << 20;
    let mut buf = vec![0xa5u8; CHUNK];
    let mut off = 0u64;
    while off < size {
        let n = CHUNK.min((size - off) as usize);
        for (i, block) in buf[..n].chunks_mut(4096).enumerate() {
            let o = off + (i as u64) * 4096;
            let b = o.to_le_bytes();
            let k = b.len().min(block.len());
            block[..k].copy_from_slice(&b[..k]);
        }
        f.write_all(&buf[..n])?;
        off += n as u64;
        if dmalab_core::signal::stop_requested() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "interrupted while filling",
            ));
        }
    }
    f.sync_all()?;
    // SAFETY: advice on our own open file.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_file_is_filled_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        {
            let t = create(&p, 3 << 20, "--target").unwrap();
            assert!(t.created);
            let data = fs::read(&p).unwrap();
            assert_eq!(data.len(), 3 << 20);
            assert_eq!(&data[4096..4104], &4096u64.to_le_bytes());
            assert_eq!(data[5000], 0xa5);
        }
        assert!(!p.exists());
        // An existing path is not overwritten by create.
        fs::write(&p, b"x").unwrap();
        assert!(create(&p, 4096, "--target").is_err());
        assert_eq!(fs::read(&p).unwrap(), b"x");
    }

    #[test]
    fn scratch_dir_is_removed() {
        let t = scratch(1 << 20).unwrap();
        let dir = t.path.parent().unwrap().to_path_buf();
        assert!(dir.exists());
        drop(t);
        assert!(!dir.exists());
    }
}
