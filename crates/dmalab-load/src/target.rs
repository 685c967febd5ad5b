//! The target: a scratch file, a file dmalab creates, an existing file, a
//! block device, or (for the nvme engine) an NVMe generic character device.
//!
//! A file dmalab creates is first filled with written data: a sparse or
//! fallocated file is read back as zeros by the kernel with no device I/O at
//! all, which would make storage reads a memset. It is removed afterwards
//! (on drop, also after an error or an interrupt) unless `keep`.

use crate::engine::{parent_dir, EngineKind, TargetInfo, TargetRequest};
use crate::plan::Plan;
use dmalab_core::host::DeviceInfo;
use dmalab_core::safety::{check_write_target, Origin};
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
    /// The engine could not ready the device (formatting, connecting).
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
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
    dmalab_core::ledger::file_created(path);
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

/// What a file or block device target is, for the engines that take one
/// (`io_uring`, and `null`, which never creates it). `engine` names the
/// engine in messages. A path that does not exist is a file to create with
/// `--size` bytes; no path is a scratch file (or nothing, for `null`).
pub fn inspect_file_or_block(
    req: &TargetRequest,
    engine: EngineKind,
) -> Result<TargetInfo, UsageError> {
    let creates = engine.creates_target();
    let create_size = || -> Result<u64, UsageError> {
        match req.size_bytes {
            Some(0) => Err(UsageError::new("--size", "must be greater than 0")),
            _ => Ok(req.create_bytes()),
        }
    };
    let Some(path) = &req.target else {
        let size = create_size()?;
        if creates {
            check_room(&std::env::temp_dir(), size)?;
        }
        return Ok(TargetInfo {
            path: None,
            exists: false,
            kind: if creates { "file" } else { "none" }.into(),
            size_bytes: size,
            logical_block_size: logical_block_size(&std::env::temp_dir()),
            creates,
        });
    };
    if !path.exists() {
        let parent = parent_dir(path);
        if !parent.is_dir() {
            return Err(UsageError::new(
                "--target",
                format!(
                    "{} does not exist, so a file cannot be created in it",
                    parent.display()
                ),
            ));
        }
        let size = create_size()?;
        if creates {
            check_room(&parent, size)?;
        }
        return Ok(TargetInfo {
            path: Some(path.clone()),
            exists: false,
            kind: "file".into(),
            size_bytes: size,
            logical_block_size: logical_block_size(&parent),
            creates,
        });
    }
    if path.is_dir() {
        return Err(UsageError::new(
            "--target",
            format!(
                "{} is a directory; name a file in it (dmalab creates and removes it) or a block device",
                path.display()
            ),
        ));
    }
    let d = DeviceInfo::describe(path)
        .ok_or_else(|| UsageError::new("--target", format!("cannot use {}", path.display())))?;
    if d.kind == "char" {
        return Err(UsageError::new(
            "--target",
            format!(
                "{} is a character device; only --engine nvme takes one (/dev/ngXnY)",
                path.display()
            ),
        ));
    }
    let info = TargetInfo {
        path: Some(path.clone()),
        exists: true,
        kind: if d.kind == "block" { "block" } else { "file" }.into(),
        size_bytes: d.size_bytes,
        logical_block_size: d.logical_block_size.max(512),
        creates: false,
    };
    check_size_of_existing(req, &info)?;
    Ok(info)
}

/// A file of `size` bytes that dmalab creates in `dir` must fit in what the
/// filesystem has free, checked before anything is written.
fn check_room(dir: &Path, size: u64) -> Result<(), UsageError> {
    dmalab_core::sys::check_room(
        dir,
        size,
        "--size",
        "choose a smaller --size or a --target on a filesystem with room",
    )
}

/// `--size` only sizes a file dmalab creates: naming another size for an
/// existing target is a mistake worth stopping for.
pub fn check_size_of_existing(req: &TargetRequest, info: &TargetInfo) -> Result<(), UsageError> {
    if let (Some(s), Some(p)) = (req.size_bytes, &info.path) {
        if s != info.size_bytes {
            return Err(UsageError::new(
                "--size",
                format!(
                    "{} already exists ({} bytes); --size only sizes a file dmalab creates: use --region to limit the part used",
                    p.display(),
                    info.size_bytes
                ),
            ));
        }
    }
    Ok(())
}

/// The safety guard before a run that makes the device write host data
/// to an existing target: only what the user named with `--allow-destroy`
/// and what passes every check of `dmalab_core::safety`.
pub fn check_storage_write(
    plan: &Plan,
    exists: bool,
    allow_destroy: Option<&Path>,
) -> Result<(), UsageError> {
    if !plan.writes_storage() || !exists {
        return Ok(());
    }
    let Some(p) = &plan.target else {
        return Ok(());
    };
    check_write_target(p, Origin::Existing, allow_destroy).map_err(|r| {
        UsageError::new(
            if allow_destroy.is_some() {
                "--allow-destroy"
            } else {
                "--target"
            },
            r.to_string(),
        )
    })?;
    Ok(())
}

/// The prepared target of a file or block device run: a scratch file, a
/// file created at the path, or the existing file or device.
pub fn prepare_file_or_block(info: &TargetInfo, keep: bool) -> Result<PreparedTarget, TargetError> {
    let mut t = match (&info.path, info.exists) {
        (None, _) => scratch(info.size_bytes)?,
        (Some(p), false) => create(p, info.size_bytes, "--target")?,
        (Some(p), true) => existing(p)?,
    };
    if t.created && keep {
        t.keep();
        eprintln!("dmalab: keeping {}", t.path.display());
    }
    Ok(t)
}

/// An existing regular file or block device, opened once with O_DIRECT to
/// see that it takes direct I/O.
pub fn existing(path: &Path) -> Result<PreparedTarget, TargetError> {
    let meta = fs::metadata(path)
        .map_err(|e| UsageError::new("--target", format!("cannot use {}: {e}", path.display())))?;
    let ft = meta.file_type();
    let (kind, size) = if ft.is_file() {
        (TargetKind::File, meta.len())
    } else if ft.is_block_device() {
        let f = File::open(path).map_err(io(format!("open {}", path.display())))?;
        let size = dmalab_core::sys::blockdev::block_device_size(&f)
            .map_err(io(format!("size of {}", path.display())))?;
        (TargetKind::Block, size)
    } else {
        return Err(UsageError::new(
            "--target",
            format!(
                "{} is neither a regular file nor a block device; name a file or a block device",
                path.display()
            ),
        )
        .into());
    };
    check_direct(path, "--target")?;
    Ok(PreparedTarget {
        path: path.to_path_buf(),
        kind,
        created: false,
        size_bytes: size,
        logical_block_size: logical_block_size(path),
        keep: true,
        dir: None,
    })
}

/// The logical block size of the device holding `path` (512 at least, and
/// when unknown).
pub fn logical_block_size(path: &Path) -> u64 {
    DeviceInfo::describe(path)
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
    let bar = dmalab_core::progress::Bar::bytes("filling the target", size);
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
        bar.inc(n as u64);
        if dmalab_core::signal::stop_requested() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "interrupted while filling",
            ));
        }
    }
    bar.set_message("syncing the target");
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
