//! Checks before `--swap dev:PATH` overwrites a block device with a swap
//! header: it must be a whole block device the user named, not mounted, not
//! in use (holders, active swap, exclusive open) and holding no filesystem,
//! volume or partition table that would be lost.
//!
//! TODO(lead): switch to `dmalab_core::safety` once the load helper's guard
//! is merged, so both commands share one set of rules.

use dmalab_core::UsageError;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

fn refuse(path: &Path, why: String) -> UsageError {
    UsageError::new(
        "--swap",
        format!("refusing to use {} as swap: {why}", path.display()),
    )
}

/// Size of an open block device, bytes.
pub fn device_size(f: &fs::File) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    let mut size: u64 = 0;
    // BLKGETSIZE64 = _IOR(0x12, 114, size_t)
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    // SAFETY: the fd is an open block device and size is a writable u64.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &mut size) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(size)
}

/// Known on-disk signatures: (offset, magic, what).
const SIGNATURES: [(u64, &[u8], &str); 7] = [
    (1080, &[0x53, 0xEF], "an ext2/3/4 filesystem"),
    (0, b"XFSB", "an XFS filesystem"),
    (65600, b"_BHRfS_M", "a btrfs filesystem"),
    (512, b"LABELONE", "an LVM physical volume"),
    (512, b"EFI PART", "a GPT partition table"),
    (0, b"\xEB\x3C\x90", "a FAT filesystem"),
    (32769, b"CD001", "an ISO 9660 filesystem"),
];

/// Runs every check; errors are usage errors naming the device and why.
pub fn check_swap_device(path: &Path) -> Result<(), UsageError> {
    let meta = fs::metadata(path).map_err(|e| refuse(path, format!("cannot stat it: {e}")))?;
    if !meta.file_type().is_block_device() {
        return Err(refuse(
            path,
            "it is not a block device (for a file use --swap file:PATH:SIZE)".into(),
        ));
    }
    let rdev = meta.rdev();
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    let sys = fs::canonicalize(format!("/sys/dev/block/{maj}:{min}"))
        .map_err(|e| refuse(path, format!("no sysfs entry: {e}")))?;
    if fs::read_dir(sys.join("holders")).is_ok_and(|mut d| d.next().is_some()) {
        return Err(refuse(path, "another device (dm, md, ...) holds it".into()));
    }
    // Mounted: the device itself or any of its partitions.
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut ours = vec![format!("{maj}:{min}")];
    if let Ok(rd) = fs::read_dir(&sys) {
        for e in rd.filter_map(Result::ok) {
            if let Ok(d) = fs::read_to_string(e.path().join("dev")) {
                if e.path().join("partition").exists() {
                    ours.push(d.trim().to_string());
                }
            }
        }
    }
    for line in info.lines() {
        if let Some(dev) = line.split_whitespace().nth(2) {
            if ours.iter().any(|o| o == dev) {
                return Err(refuse(
                    path,
                    format!("it (or a partition of it, {dev}) is mounted"),
                ));
            }
        }
    }
    if ours.len() > 1 {
        return Err(refuse(
            path,
            "it has partitions; name an unused partition instead".into(),
        ));
    }
    let canon = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if crate::sysinfo::read_swaps()
        .iter()
        .any(|s| s.path == canon || s.path == path)
    {
        return Err(refuse(
            path,
            "it is already an active swap area (use --swap existing)".into(),
        ));
    }
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map_err(|e| refuse(path, format!("cannot open it exclusively (in use?): {e}")))?;
    for (off, magic, what) in SIGNATURES {
        let mut buf = vec![0u8; magic.len()];
        if f.seek(SeekFrom::Start(off)).is_ok() && f.read_exact(&mut buf).is_ok() && buf == magic {
            return Err(refuse(
                path,
                format!("it holds {what}; wipe it yourself first if it is really unused"),
            ));
        }
    }
    let mut mbr = [0u8; 2];
    if f.seek(SeekFrom::Start(510)).is_ok() && f.read_exact(&mut mbr).is_ok() && mbr == [0x55, 0xAA]
    {
        return Err(refuse(
            path,
            "it holds an MBR partition table or boot sector".into(),
        ));
    }
    let size = device_size(&f).map_err(|e| refuse(path, format!("cannot read its size: {e}")))?;
    if size < 1 << 20 {
        return Err(refuse(path, format!("it is only {size} bytes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_regular_files() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = check_swap_device(f.path()).unwrap_err();
        assert!(e.message.contains("not a block device"), "{e}");
    }
}
